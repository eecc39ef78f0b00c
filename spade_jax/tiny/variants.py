"""Difficulty variants of the library's training families, for the warm start.

A library family is a program generator with difficulty parameters (`envs.library.Family`);
the library fixes a few settings (levels). The warm start's designer examples otherwise hold
one program per training family (11 examples; 19 with the memory-seeded prompts), and the
warm-started designer's samples barely respond to its reward (same program in 71 of 72 slots); with
variants they move. A variant draws every
integer parameter of a family (except ``max_turns``) around its easiest level, uniformly in
``[ceil(v / 2), 2 v]``: the designer learns that ranges, lengths and counts are knobs, and the
agent's oracle episodes cover the same spread.

Variants never equal a library setting (so no held-out setting becomes a training
environment), come from training families only, and must fit the tiny language
(``Language.max_tokens``); the warm start checks them on device like designer samples.
"""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np

from spade_jax.envs.ir import assembly
from spade_jax.envs.ir.program import stack_programs
from spade_jax.envs.library import FAMILIES
from spade_jax.tiny.language import feasible, library_tokens


@dataclasses.dataclass(frozen=True)
class Variant:
  family: str
  params: dict
  tokens: tuple[int, ...]  # designer-language tokens (ends with the end token)


def variant_params(name: str) -> tuple[dict, tuple[str, ...]]:
  """``(base, knobs)``: the family's easiest setting with its defaults filled in, and the
  integer parameters a variant draws."""
  fam = FAMILIES[name]
  sig = inspect.signature(fam.program).parameters
  base = {k: p.default for k, p in sig.items()} | dict(fam.levels[0])
  knobs = tuple(
    k
    for k, v in base.items()
    if isinstance(v, int) and not isinstance(v, bool) and k != "max_turns" and v > 0
  )
  return base, knobs


def library_variants(
  lang, families, per_family: int, seed: int, hints: str = "library"
) -> list[Variant]:
  """Up to ``per_family`` distinct variants of each of ``families`` (fewer where a family has
  fewer distinct settings that fit), deterministic in ``seed``."""
  if per_family <= 0:
    return []
  library_texts = {f.program(**lv) for f in FAMILIES.values() for lv in f.levels}
  out = []
  for i, name in enumerate(sorted(families)):
    rng = np.random.default_rng([seed, i, 313])
    base, knobs = variant_params(name)
    seen = set()
    for _ in range(per_family * 8):
      if len(seen) == per_family:
        break
      params = dict(base)
      for k in knobs:
        params[k] = int(rng.integers(-(-base[k] // 2), 2 * base[k] + 1))
      key = tuple(params[k] for k in knobs)
      if key in seen:
        continue
      try:
        text = FAMILIES[name].program(**params)
      except (ValueError, AssertionError):
        continue
      if text in library_texts:
        continue
      tokens = library_tokens(lang, text, hints)
      if tokens is None:
        continue
      seen.add(key)
      out.append(Variant(name, params, tuple(tokens)))
  return out


def checked_variants(lang, tok, variants, key, n_seeds: int = 8):
  """``[(variant, host EnvProgram)]`` of the ``variants`` that assemble on the host and pass
  the designer samples' feasibility check (`language.feasible`) on ``n_seeds`` resets."""
  if not variants:
    return []
  programs = [assembly.assemble(lang.decode(list(v.tokens)), tok, lang.cfg) for v in variants]
  ok = np.asarray(feasible(lang, stack_programs(programs), key, n_seeds))
  return [(v, p) for v, p, good in zip(variants, programs, ok) if good]
