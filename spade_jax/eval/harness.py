"""Runs suites with a player into a results directory, resuming what is already written.

`evaluate` is the one code path of the offline CLI (`experiments/eval.py`) and the in-loop
evaluation (`spade_jax.train`, every ``eval.every`` steps): for each suite, the first
``limit`` prompts of every category times ``k`` samples, minus the ``(prompt, sample)`` pairs
already in ``<out>/<suite>.jsonl``, are played ``flush`` episodes at a time and appended; the
summary over the requested pairs is written to ``<out>/summary.json`` and returned.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from spade_jax import multihost
from spade_jax.eval import results
from spade_jax.eval.suite import Suite, limit_prompts


def evaluate(
  suites: Sequence[Suite],
  player_for: Callable[[Suite], object],
  out: Path,
  *,
  k: int = 1,
  limit: int | None = None,
  categories: dict[str, tuple[str, ...]] | None = None,
  flush: int = 64,
  log: Callable[[str], None] = lambda s: None,
) -> dict[str, dict]:
  """``{suite name: results.summarize(...)}`` (module docstring); ``player_for(suite)`` gives
  the player (`players.ModelPlayer` / `players.ScriptedPlayer`) of a suite; ``categories``
  keeps only the named categories of a suite (absent or empty: all). In a multi-process run
  every process plays every episode (the sampler is one SPMD program) and process 0 alone
  writes the files; the others read only what was there before the call."""
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k}")
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  summary: dict[str, dict] = {}
  for suite in suites:
    t0 = time.perf_counter()
    path = out / f"{suite.name}.jsonl"
    done = results.read_records(path)
    prompts = suite.prompts()
    keep = (categories or {}).get(suite.name)
    if keep:
      have = {p.category for p in prompts}
      unknown = sorted(set(keep) - have)
      if unknown:
        raise ValueError(f"{suite.name} has no category {unknown}; it has {sorted(have)}")
      prompts = [p for p in prompts if p.category in keep]
    prompts = limit_prompts(prompts, limit)
    wanted = [(p, s) for p in prompts for s in range(k)]
    todo = [(p, s) for p, s in wanted if (p.id, s) not in done]
    log(f"{suite.name}: {len(wanted)} episodes ({len(wanted) - len(todo)} already written)")
    player = player_for(suite) if todo else None
    for lo in range(0, len(todo), flush):
      eps = player.play(suite, todo[lo : lo + flush])
      recs = [e.record() for e in eps]
      if multihost.is_writer():
        results.append_records(path, recs)
      done.update({(r["prompt_id"], r["sample"]): r for r in recs})
      log(f"{suite.name}: {min(lo + flush, len(todo))}/{len(todo)} played")
    recs = [done[(p.id, s)] for p, s in wanted]
    cats = list(dict.fromkeys(p.category for p in prompts))
    summary[suite.name] = results.summarize(recs, cats)
    summary[suite.name]["metric"] = suite.metric
    summary[suite.name]["seconds"] = time.perf_counter() - t0
  if multihost.is_writer():
    _merge_summary(out / "summary.json", summary)
  return summary


def _merge_summary(path: Path, summary: dict) -> None:
  old = {}
  if path.exists():
    try:
      old = json.loads(path.read_text())
    except ValueError:
      old = {}
  old.update(summary)
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(old, indent=1, sort_keys=True))
  tmp.replace(path)


def flat_metrics(summary: dict[str, dict], prefix: str = "eval") -> dict[str, float]:
  """Scalar metrics of a summary for the metrics log: ``eval/<suite>/<category>``,
  ``eval/<suite>/overall`` and ``eval/<suite>/errors``."""
  out = {}
  for suite, s in summary.items():
    for cat, v in s["categories"].items():
      out[f"{prefix}/{suite}/{cat}"] = v["mean"]
    out[f"{prefix}/{suite}/overall"] = s["overall"]["mean"]
    out[f"{prefix}/{suite}/errors"] = float(s["errors"])
  return out
