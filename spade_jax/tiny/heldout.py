"""Held-out evaluation of the tiny front end, and the library split it relies on.

The library families expressible in the designer language (`language.tiny_library`) are split
once, by name, into **training families** (warm start, the ``fixed`` pool baseline) and
**held-out families** (evaluation only; never a training environment). Held-out episodes are
fixed (family, level, seed) triples, played greedily without the hint by the on-device rollout,
so successive evaluations of one run differ only by the policy.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import nnx

from spade_jax.envs import assembly
from spade_jax.envs.host_rollout import RolloutConfig
from spade_jax.envs.rollout import DeviceRollout
from spade_jax.tiny.language import tiny_library

# Held out: one family of each answer kind (a yes/no bit, a small count, an int list, a
# number-theory int), across four skills; the rest train (warm start, the fixed pool).
HELDOUT_FAMILIES = ("logic", "nim", "sorting", "gcd_lcm")


def split_families(names) -> tuple[tuple[str, ...], tuple[str, ...]]:
  """``(train, heldout)`` among ``names`` (`HELDOUT_FAMILIES` are held out)."""
  names = sorted(set(names))
  held = tuple(n for n in names if n in HELDOUT_FAMILIES)
  return tuple(n for n in names if n not in held), held


@dataclasses.dataclass
class LibraryPrograms:
  """Host-assembled library programs of the tiny language: ``by_family[name][level]``."""

  by_family: dict
  tokens: dict  # (name, level) -> designer tokens
  texts: dict  # (name, level) -> assembly text

  @classmethod
  def build(cls, lang, tok) -> LibraryPrograms:
    by_family, tokens, texts = {}, {}, {}
    for name, level, toks in tiny_library(lang):
      text = lang.decode(toks)
      by_family.setdefault(name, {})[level] = assembly.assemble(text, tok, lang.cfg)
      tokens[(name, level)], texts[(name, level)] = list(toks), text
    return cls(by_family, tokens, texts)

  def split(self):
    return split_families(self.by_family)


class TinyHeldout:
  """Greedy, unhinted plays of fixed held-out episodes -> ``eval/accuracy`` and per family."""

  def __init__(self, graphdef, params, tok, framing, library: LibraryPrograms, cfg, *, spec):
    _, held = library.split()
    if not held:
      raise ValueError("no held-out family in the tiny library")
    rng = np.random.default_rng(cfg.eval.seed)
    self.families, self.programs, self.seeds = [], [], []
    for name in held:
      levels = sorted(library.by_family[name])
      for k in range(cfg.eval.episodes_per_family):
        self.families.append(name)
        self.programs.append(library.by_family[name][levels[k % len(levels)]])
        self.seeds.append(int(rng.integers(2**31)))
    rollout_cfg = RolloutConfig(
      max_turns=cfg.agent.max_turns,
      max_new_tokens=cfg.agent.max_new_tokens,
      max_context=cfg.agent.max_context,
      greedy=True,
    )
    self.device = DeviceRollout(
      nnx.merge(graphdef, params),
      tok,
      framing,
      rollout_cfg,
      program_cfg=spec.program_cfg,
      prompt_len=spec.prompt_len,
      feed_chunk=spec.feed_chunk,
    )
    self.held = held

  def evaluate(self, params) -> dict:
    out = self.device(self.programs, self.seeds, [False] * len(self.programs), params=params)
    solved = np.asarray(jax.device_get(out.solved_B))
    fam = np.asarray(self.families)
    metrics = {"eval/accuracy": float(solved.mean())}
    for name in self.held:
      metrics[f"eval/{name}"] = float(solved[fam == name].mean())
    return metrics
