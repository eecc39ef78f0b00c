"""Held-out evaluation of the tiny front end, and the library split it relies on.

The library families expressible in the designer language (`language.tiny_library`) are split
once, by name, into **training families** and **held-out families**. Training environments of
a run are: the designer's own programs, and (warm start, the ``fixed`` pool baseline) the
training families at their easy levels, ``level <= warm_start.max_level``. Held-out evaluation
plays every library setting that is never a training environment:

* ``unseen_levels``: training families at their harder levels (``level > max_level``): the
  same kinds of task at difficulty settings the agent is never trained on;
* ``unseen_families``: the held-out families at every level (a different answer kind in each
  of four skills: generalisation the tiny model is not expected to show), and the families a
  run leaves out of training (config ``families``: a subset of the training families).

Held-out episodes are fixed (family, level, seed) triples, played greedily without the hint by
the on-device rollout, so successive evaluations of one run differ only by the policy.
``eval/accuracy`` is the solve rate over all of them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
from flax import nnx

from spade_jax import multihost
from spade_jax.envs.ir import assembly
from spade_jax.envs.library import HELDOUT_FAMILIES
from spade_jax.rollout.device import DeviceRollout
from spade_jax.rollout.host import RolloutConfig
from spade_jax.tiny.language import tiny_library


def split_families(names, only=()) -> tuple[tuple[str, ...], tuple[str, ...]]:
  """``(train, heldout)`` among ``names``: `HELDOUT_FAMILIES` are held out; with ``only`` (a
  subset of the other families), training is ``only`` and every other family is held out."""
  names = sorted(set(names))
  train = [n for n in names if n not in HELDOUT_FAMILIES]
  if only:
    wrong = sorted(set(only) - set(train))
    if wrong:
      raise ValueError(f"families {wrong} are not training families of the library: {train}")
    train = [n for n in train if n in only]
  return tuple(train), tuple(n for n in names if n not in train)


@dataclasses.dataclass
class LibraryPrograms:
  """Host-assembled library programs of the tiny language: ``by_family[name][level]``."""

  by_family: dict
  tokens: dict  # (name, level) -> designer tokens
  texts: dict  # (name, level) -> assembly text
  only: tuple = ()  # the run's training families (`split_families`); empty: all but held-out

  @classmethod
  def build(cls, lang, tok, hints: str = "library", only=()) -> LibraryPrograms:
    by_family, tokens, texts = {}, {}, {}
    for name, level, toks in tiny_library(lang, hints):
      text = lang.decode(toks)
      by_family.setdefault(name, {})[level] = assembly.assemble(text, tok, lang.cfg)
      tokens[(name, level)], texts[(name, level)] = list(toks), text
    lib = cls(by_family, tokens, texts, tuple(only))
    lib.split()  # refuses unknown or held-out names in ``only``
    return lib

  def split(self):
    return split_families(self.by_family, self.only)


def heldout_settings(library: LibraryPrograms, max_level: int) -> list[tuple[str, int, str]]:
  """``(family, level, group)`` of every library setting that is never a training environment
  (``group``: ``unseen_levels`` or ``unseen_families``; see the module docstring)."""
  train, held = library.split()
  out = []
  for name in train:
    out += [(name, lv, "unseen_levels") for lv in sorted(library.by_family[name]) if lv > max_level]
  for name in held:
    out += [(name, lv, "unseen_families") for lv in sorted(library.by_family[name])]
  return out


def training_settings(library: LibraryPrograms, max_level: int) -> list[tuple[str, int]]:
  """``(family, level)`` of the library settings a run may train on (warm start, fixed pool)."""
  train, _ = library.split()
  return [(n, lv) for n in train for lv in sorted(library.by_family[n]) if lv <= max_level]


def greedy_rollout(graphdef, params, tok, framing, cfg, spec, **kw) -> DeviceRollout:
  """The tiny run's episodes played greedily on device (a `DeviceRollout` with the run's turn,
  token and context limits and the rollout layout of ``spec``, a `RolloutSpec`): held-out
  evaluation, the warm start's oracle episodes (``kw``: script size) and the analysis tools."""
  rollout_cfg = RolloutConfig(
    max_turns=cfg.agent.max_turns,
    max_new_tokens=cfg.agent.max_new_tokens,
    max_context=cfg.agent.max_context,
    greedy=True,
  )
  return DeviceRollout(
    nnx.merge(graphdef, params),
    tok,
    framing,
    rollout_cfg,
    program_cfg=spec.program_cfg,
    prompt_len=spec.prompt_len,
    feed_chunk=spec.feed_chunk,
    **kw,
  )


class TinyHeldout:
  """Greedy, unhinted plays of fixed held-out episodes -> ``eval/accuracy``, one accuracy per
  group (``eval/unseen_levels``, ``eval/unseen_families``) and per family (``eval/<name>``)."""

  def __init__(self, graphdef, params, tok, framing, library: LibraryPrograms, cfg, *, spec):
    settings = heldout_settings(library, cfg.warm_start.max_level)
    if not settings:
      raise ValueError("no held-out setting in the tiny library")
    rng = np.random.default_rng(cfg.eval.seed)
    self.families, self.groups, self.programs, self.seeds = [], [], [], []
    for name, level, group in settings:
      for _ in range(cfg.eval.episodes_per_setting):
        self.families.append(name)
        self.groups.append(group)
        self.programs.append(library.by_family[name][level])
        self.seeds.append(int(rng.integers(2**31)))
    self.device = greedy_rollout(graphdef, params, tok, framing, cfg, spec)

  def evaluate(self, params, path=None) -> dict:
    """The metrics; with ``path``, also one JSON line per episode (family, group, seed, solved)
    written there, so two evaluations can be compared episode by episode (the same episodes
    every time: `spade_jax.tiny.analysis.trends` pairs them)."""
    out = self.device(self.programs, self.seeds, [False] * len(self.programs), params=params)
    solved = np.asarray(multihost.to_host(out.solved_B))
    if path is not None:
      rows = zip(self.families, self.groups, self.seeds, solved.tolist())
      Path(path).write_text(
        "".join(
          json.dumps({"family": f, "group": g, "seed": s, "solved": bool(x)}) + "\n"
          for f, g, s, x in rows
        )
      )
    metrics = {"eval/accuracy": float(solved.mean()), "eval/episodes": float(len(solved))}
    for labels in (self.groups, self.families):
      labels = np.asarray(labels)
      for name in dict.fromkeys(labels.tolist()):
        metrics[f"eval/{name}"] = float(solved[labels == name].mean())
    return metrics
