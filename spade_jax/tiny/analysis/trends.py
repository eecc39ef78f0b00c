"""First-quarter vs last-quarter trends of a recorded tiny SPADE run.

  python -m spade_jax.tiny.analysis.trends runs/tiny [--check]
    [--same-as OTHER_RUN [--ignore PREFIX]]

Reads ``RUN/metrics.jsonl`` and prints, for each series, the mean over the first and the last
quarter of the steps that logged it: held-out accuracy (``eval/accuracy`` and its two parts
``eval/unseen_levels`` and ``eval/unseen_families``, each with the number of evaluations and
their range), the agent's solve rate on the current
pools, the designer's valid rate (per game and per attempt), and the difficulty proxies of the
designer's pools (``designer/difficulty_bits``: bits of task randomness of valid programs;
``designer/difficulty``: unhinted failure rate of each new pool for the current agent;
``designer/difficulty_ref``: its failure rate for the frozen warm-started policy, a yardstick
that does not learn). ``--check`` exits 1 unless the designer wrote valid programs at the
first step, held-out accuracy rose, and the designer's pools got harder: ``difficulty_ref``
rose (runs that log it), else bits or failure rate rose (the acceptance trends of the tiny
reproduction). A series "rose" when its last-quarter mean exceeds its first-quarter mean by
more than one standard error of that difference (``stderr``, from the spread of the values
in each quarter), so a change within pool-to-pool noise does not pass.

Pool series (``designer/*``, ``agent/*``) are blocked by the pool's skill composition when the
tiny run's ``config.json`` sits beside its metrics: the skill schedule rotates
deterministically (period 5 regenerations in tiny.py), and which skills a pool holds moves its
failure rate more than the designer does (``by_skills``: mean ``difficulty_ref`` per
composition, 0.43 to 0.86 over the five of the recorded run in docs/tiny). Each last-quarter
value is paired with the first-quarter value of the same skill composition (k-th with k-th),
and ``paired_diff`` / ``paired_stderr`` are the mean and standard error of those differences;
``--check`` then uses them for the difficulty clause.
The quarter means are unchanged (the quarters hold whole periods of the schedule); the paired
standard error leaves out the between-composition spread that cancels in their difference.

Held-out accuracy is paired by episode where the run wrote its evaluations episode by episode
(``RUN/eval/stepNNNNNN.jsonl``; every evaluation plays the same episodes): each episode's mean
success over the last quarter of the evaluations minus its mean over the first quarter, with
the standard error over episodes (``paired_diff`` / ``paired_stderr``, ``pairs`` = episodes).
Unlike the spread of a few evaluation means, which is 0 when two evaluations happen to score
the same, this counts how many episodes changed and in which direction: a net gain of two
episodes out of 248, with ten newly solved and eight newly failed, does not pass. Its two
parts (``eval/unseen_levels``, ``eval/unseen_families``) are paired the same way over their own
episodes; `--check` tests the whole.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from spade_jax import metrics

POOL_SERIES = ("designer/", "agent/")

SERIES = (
  "eval/accuracy",
  "eval/unseen_levels",
  "eval/unseen_families",
  "agent/solve_rate",
  "agent/solve_rate_hint",
  "designer/valid_rate",
  "designer/attempt_valid_rate",
  "designer/regret_mean",
  "designer/difficulty_bits",
  "designer/difficulty",
  "designer/difficulty_ref",
)


def quarters(rows: list[dict], key: str) -> tuple[float, float, float] | None:
  """(first-quarter mean, last-quarter mean, standard error of their difference)."""
  vals = [r[key] for r in rows if r.get(key) is not None]
  if len(vals) < 2:
    return None
  q = max(1, len(vals) // 4)
  first, last = np.asarray(vals[:q]), np.asarray(vals[-q:])
  var = lambda x: float(np.var(x, ddof=1)) / len(x) if len(x) > 1 else 0.0
  return float(first.mean()), float(last.mean()), float(np.sqrt(var(first) + var(last)))


def skill_blocks(run_dir: Path) -> dict | None:
  """``step -> skill composition`` of a tiny run's pools, from ``run_dir/config.json``
  (None without one)."""
  path = run_dir / "config.json"
  if not path.exists() or json.loads(path.read_text()).get("front_end") != "tiny":
    return None
  from spade_jax.tiny.config import load_run_config
  from spade_jax.tiny.setup import TinySetup

  config = load_run_config(run_dir)
  setup = TinySetup(config)
  return {step: setup.skills_of(step) for step in range(config.steps)}


def paired(rows: list[dict], key: str, blocks: dict) -> tuple[float, float, int] | None:
  """(mean, standard error, count) of last-minus-first-quarter differences, each last-quarter
  value paired with a first-quarter value of the same skill composition."""
  vals = [(blocks.get(r["step"]), r[key]) for r in rows if r.get(key) is not None]
  if len(vals) < 2:
    return None
  q = max(1, len(vals) // 4)
  first = {}
  for block, v in vals[:q]:
    first.setdefault(block, []).append(v)
  diffs = []
  for block, v in vals[-q:]:
    if first.get(block):
      diffs.append(v - first[block].pop(0))
  if len(diffs) < 2:
    return None
  d = np.asarray(diffs)
  return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))), len(d)


def heldout_paired(run_dir: Path, group: str | None = None) -> tuple[float, float, int] | None:
  """(mean, standard error, episodes) of each held-out episode's success over the last quarter
  of the evaluations minus over the first, from ``run_dir/eval/step*.jsonl`` (None without
  two evaluations); with ``group``, over that group's episodes only (e.g. ``unseen_levels``)."""
  files = sorted((run_dir / "eval").glob("step*.jsonl"))
  if len(files) < 2:
    return None
  evals = [[json.loads(x) for x in f.read_text().splitlines()] for f in files]
  key = lambda ev: [(e["family"], e["group"], e["seed"]) for e in ev]
  if any(key(ev) != key(evals[0]) for ev in evals[1:]) or len(evals[0]) < 2:
    raise ValueError(f"{run_dir / 'eval'}: the evaluations did not play the same episodes")
  solved = np.asarray([[e["solved"] for e in ev] for ev in evals], np.float64)  # [E, N]
  if group is not None:
    solved = solved[:, [e["group"] == group for e in evals[0]]]
    if solved.shape[1] < 2:
      return None
  q = max(1, len(evals) // 4)
  d = solved[-q:].mean(0) - solved[:q].mean(0)
  return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))), len(d)


def by_skills(rows: list[dict], key: str, blocks: dict) -> dict:
  """Mean of ``key`` per pool skill composition (skills joined by ``/``, sorted)."""
  groups = {}
  for r in rows:
    if r.get(key) is not None:
      groups.setdefault("/".join(sorted(set(blocks.get(r["step"], ())))), []).append(r[key])
  return {k: round(float(np.mean(v)), 4) for k, v in sorted(groups.items())}


def trends(path: Path) -> dict:
  rows = metrics.read_metrics(path)
  blocks = skill_blocks(path.parent)
  out = {"steps": len(rows)}
  for key in SERIES:
    fl = quarters(rows, key)
    if fl is not None:
      out[key] = {
        "first_quarter": round(fl[0], 4),
        "last_quarter": round(fl[1], 4),
        "stderr": round(fl[2], 4),
      }
      if key.startswith("eval/"):  # paired by episode (the run's eval files), else unpaired
        group = key.removeprefix("eval/")
        pd = heldout_paired(path.parent, None if group == "accuracy" else group)
        vals = [r[key] for r in rows if r.get(key) is not None]
        out[key].update(evaluations=len(vals), min=round(min(vals), 4), max=round(max(vals), 4))
      elif blocks and key.startswith(POOL_SERIES):  # paired by skill composition
        pd = paired(rows, key, blocks)
      else:
        pd = None
      if pd is not None:
        out[key].update(paired_diff=round(pd[0], 4), paired_stderr=round(pd[1], 4), pairs=pd[2])
      if blocks and key == "designer/difficulty_ref":
        out[key]["by_skills"] = by_skills(rows, key, blocks)
  first = [r for r in rows if r.get("designer/valid_rate") is not None]
  out["first_valid_rate"] = first[0]["designer/valid_rate"] if first else None
  return out


def timing(path: Path) -> dict:
  """Where a run's time went (``perf/`` series; timings are not part of the trends): the warm
  start (and the wait for the ahead-of-time compile) from ``warm_start.json``, the first
  regeneration and replay steps (which include compiles or cache loads), and the median of the
  later regeneration steps (those that logged ``designer/valid_rate``) and replay steps."""
  rows = metrics.read_metrics(path)
  steps = [r for r in rows if r.get("perf/step_s") is not None]
  if not steps:
    return {}
  regen = [r for r in steps if r.get("designer/valid_rate") is not None]
  replay = [r for r in steps if r.get("designer/valid_rate") is None]
  out = {"steps_s": round(sum(r["perf/step_s"] for r in steps), 1)}
  for name, group in (("regeneration", regen), ("replay", replay)):
    if group:
      out[f"first_{name}_step_s"] = round(group[0]["perf/step_s"], 2)
      if len(group) > 1:
        out[f"median_{name}_step_s"] = round(
          float(np.median([r["perf/step_s"] for r in group[1:]])), 2
        )
  env = [r["perf/env_steps_per_s"] for r in steps if r.get("perf/env_steps_per_s")]
  if env:
    out["median_env_steps_per_s"] = round(float(np.median(env)), 1)
  warm = path.parent / "warm_start.json"
  if warm.exists():
    w = json.loads(warm.read_text())
    out.update({k.removeprefix("perf/"): v for k, v in w.items() if k.startswith("perf/")})
  return out


def same_metrics(path: Path, other: Path, ignore=()) -> tuple[int, int]:
  """``(equal, rows)``: how many rows of two runs' metrics are equal in every series but the
  ``perf/`` timings and the keys that start with an ``ignore`` prefix (a rerun of the same
  program on the same keys gives ``equal == rows``; ``ignore`` a series one of the two versions
  did not log, or one only a measurement setting changed, e.g. ``eval/``)."""
  skip = ("perf/", *ignore)
  strip = lambda r: {k: v for k, v in r.items() if not k.startswith(skip)}
  a, b = metrics.read_metrics(path), metrics.read_metrics(other)
  return sum(strip(x) == strip(y) for x, y in zip(a, b)), max(len(a), len(b))


def check(t: dict) -> list[str]:
  failures = []
  if not t.get("first_valid_rate"):
    failures.append("no valid designer program at the first regeneration")

  def rise(k):
    """The rise exceeds one standard error of the difference (pool-to-pool noise), paired by
    skill composition where the run's schedule is known (held-out: by episode, where the run
    wrote them)."""
    if k not in t:
      return False
    if "paired_diff" in t[k]:
      return t[k]["paired_diff"] > t[k]["paired_stderr"]
    return t[k]["last_quarter"] - t[k]["first_quarter"] > t[k].get("stderr", 0)

  if not rise("eval/accuracy"):
    failures.append("held-out accuracy did not rise")
  if "designer/difficulty_ref" in t:  # the pools' failure rate for the frozen warm policy
    if not rise("designer/difficulty_ref"):
      failures.append("difficulty against the frozen warm-started policy did not rise")
  elif not (rise("designer/difficulty_bits") or rise("designer/difficulty")):
    failures.append("no difficulty proxy rose")
  return failures


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("run", help="a tiny run's workdir (or its metrics.jsonl)")
  ap.add_argument("--check", action="store_true")
  ap.add_argument("--same-as", help="another run: count rows with equal non-perf metrics")
  ap.add_argument(
    "--ignore",
    action="append",
    default=[],
    help="with --same-as: series (a key or key prefix) not compared",
  )
  args = ap.parse_args()
  as_metrics = lambda p: p if p.suffix == ".jsonl" else p / "metrics.jsonl"
  path = as_metrics(Path(args.run))
  if args.same_as:
    equal, rows = same_metrics(path, as_metrics(Path(args.same_as)), args.ignore)
    print(f"non-perf metrics equal in {equal} of {rows} rows")
  t = trends(path)
  print(json.dumps({**t, "perf": timing(path)}, indent=1))
  if args.check:
    failures = check(t)
    for f in failures:
      print(f"FAIL: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
  main()
