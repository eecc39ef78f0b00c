"""Per-iteration counters of the SPADE loop: what the designer's samples did at each stage, why
validated environments were not translated, where episodes ran, and how the agent and the
designer fared by environment source. Key names are listed in docs/DESIGN.md ("Loop metrics").

* ``designer/stage/<stage>``: designer samples by first failing stage (`DESIGNER_STAGES`, every
  one present, zero included) and ``designer/stage/ok`` = ``designer/passed``.
* ``designer/refusal/<short reason>``: passed environments the translator refused, by reason
  (`short_reason`), so ``designer/translated_rate`` has its explanation beside it.
* ``agent/solve_rate/<source>`` and ``designer/regret/<source>``: by the source of the pool slot
  (`SOURCES`: new, carried, library).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from spade_jax.envs.sandbox import validate as validation

# the stages a designer sample passes through, in order: "copy" (a verbatim repeat of a library
# seed shown in the prompt, checked on the extracted code) comes right after extract
DESIGNER_STAGES = ("extract", "copy", *(s for s in validation.STAGES if s != "extract"))
SOURCES = {0.0: "new", 1.0: "carried", 2.0: "library"}  # loop.POOL_* codes


def stage_metrics(stages: dict[str, int]) -> dict[str, float]:
  """``designer/stage/<stage>`` for every stage (0 when none failed there), ``ok`` included,
  and ``designer/passed``."""
  out = {f"designer/stage/{s}": 0.0 for s in (*DESIGNER_STAGES, "ok")}
  for stage, n in stages.items():
    out[f"designer/stage/{stage}"] = out.get(f"designer/stage/{stage}", 0.0) + float(n)
  out["designer/passed"] = out["designer/stage/ok"]
  return out


_LINE = re.compile(r"^\s*line \d+\s*:\s*")
_CODE = re.compile(r"`[^`]*`")


def short_reason(reason: str, words: int = 5) -> str:
  """A metric-key-safe digest of a refusal reason: no "line N:" prefix, no quoted code, the
  text before the first colon, its first ``words`` words joined by "_" (at most 48 chars)."""
  text = _CODE.sub(" ", _LINE.sub("", reason or "")).split(":")[0]
  key = "_".join(re.findall(r"[a-z0-9]+", text.lower())[:words])[:48].strip("_")
  return key or "unknown"


def refusal_metrics(reasons: Iterable[str]) -> dict[str, float]:
  """``designer/refusal/<short reason>`` counts of untranslated passed environments."""
  out: dict[str, float] = {}
  for r in reasons:
    key = f"designer/refusal/{short_reason(r)}"
    out[key] = out.get(key, 0.0) + 1.0
  return out


def solve_by_source(returns_GP, valid_GP, source_G) -> dict[str, float]:
  """``agent/solve_rate/<source>`` over the valid unhinted plays of each source's slots."""
  returns_GP, valid_GP = np.asarray(returns_GP), np.asarray(valid_GP, bool)
  out = {}
  for code, name in SOURCES.items():
    sel = np.asarray([s == code for s in source_G], bool)[:, None] & valid_GP
    if sel.any():
      out[f"agent/solve_rate/{name}"] = float((returns_GP[sel] >= 1.0).mean())
  return out


def regret_by_source(window, source_G) -> dict[str, float]:
  """``designer/regret/<source>``: mean floored hint regret (hinted minus unhinted return at the
  pool's first step, as `rewards.regret`) over the played slots of each source, and
  ``designer/regret_games/<source>`` their number. Computed for every played slot, library and
  carried ones included (the designer's own reward only counts its new environments)."""
  r0, v0 = np.asarray(window.returns_WGP[0], np.float64), np.asarray(window.valid_WGP[0], bool)
  rh, vh = np.asarray(window.hint_returns_GH, np.float64), np.asarray(window.hint_valid_GH, bool)
  plain = (r0 * v0).sum(-1) / np.maximum(v0.sum(-1), 1)
  hinted = (rh * vh).sum(-1) / np.maximum(vh.sum(-1), 1)
  regret_G = np.maximum(hinted - plain, 0.0)
  played_G = v0.any(-1) & vh.any(-1)
  out = {}
  for code, name in SOURCES.items():
    sel = np.asarray([s == code for s in source_G], bool) & played_G
    if sel.any():
      out[f"designer/regret/{name}"] = float(regret_G[sel].mean())
      out[f"designer/regret_games/{name}"] = float(sel.sum())
  return out


def merge_by_source(parts: list[dict[str, float]]) -> dict[str, float]:
  """`regret_by_source` of several epochs (the final flush trains more than one) as one:
  game-weighted means."""
  out: dict[str, float] = {}
  for name in SOURCES.values():
    pairs = [
      (p[f"designer/regret/{name}"], p[f"designer/regret_games/{name}"])
      for p in parts
      if f"designer/regret_games/{name}" in p
    ]
    if pairs:
      n = sum(c for _, c in pairs)
      out[f"designer/regret/{name}"] = sum(m * c for m, c in pairs) / n
      out[f"designer/regret_games/{name}"] = n
  return out
