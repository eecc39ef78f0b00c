r"""Compares evaluated runs suite by suite: B - A per category, paired by prompt.

  python experiments/compare.py RUN_A RUN_B [RUN_C ...] [--names spade,fixed] [--suites ...]
  python experiments/compare.py runs/fixed:40 runs/spade:40

Each argument is a run directory, optionally ``:LABEL`` (a subdirectory of ``RUN/eval/``: a
step, ``base``, ...; default: the run's largest evaluated step). Every later run is compared
with the first on the suites both evaluated: per category the two avg@k numbers and the
difference with its paired standard error over the prompts both scored (`results.
paired_difference`). Prints markdown, or with ``--json`` one line per suite and category.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spade_jax.eval import results


def eval_dir(spec: str) -> Path:
  """``RUN[:LABEL]`` -> ``RUN/eval/LABEL`` (default label: the largest numeric step)."""
  run, _, label = spec.partition(":")
  base = Path(run) / "eval"
  if not base.is_dir():
    raise ValueError(f"{base} not found: {run} has no evaluation (run experiments/eval.py)")
  if not label:
    steps = sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())
    if not steps:
      have = sorted(p.name for p in base.iterdir() if p.is_dir())
      raise ValueError(f"{base} has no numeric step; give RUN:LABEL (have {have})")
    label = str(steps[-1])
  out = base / label
  if not out.is_dir():
    raise ValueError(f"{out} not found")
  return out


def compare(dirs: list[Path], suites: list[str] | None = None) -> list[dict[str, dict]]:
  """For each run after the first: ``{suite: paired_difference(first, run)}``."""
  out = []
  for d in dirs[1:]:
    diffs = {}
    names = suites or sorted(p.stem for p in dirs[0].glob("*.jsonl"))
    for s in names:
      a, b = dirs[0] / f"{s}.jsonl", d / f"{s}.jsonl"
      if a.exists() and b.exists():
        diffs[s] = results.paired_difference(
          list(results.read_records(a).values()), list(results.read_records(b).values())
        )
    out.append(diffs)
  return out


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="experiments/compare.py", description=__doc__.split("\n\n")[1])
  p.add_argument("runs", nargs="+", help="RUN[:LABEL], the first is the baseline")
  p.add_argument("--names", default=None, help="comma list of names for the runs")
  p.add_argument("--suites", default=None, help="comma list (default: all the first run has)")
  p.add_argument("--json", action="store_true")
  args = p.parse_args(argv)
  try:
    if len(args.runs) < 2:
      raise ValueError("give at least two runs")
    dirs = [eval_dir(r) for r in args.runs]
    names = args.names.split(",") if args.names else [r.rstrip("/") for r in args.runs]
    if len(names) != len(dirs):
      raise ValueError(f"{len(names)} names for {len(dirs)} runs")
    suites = [s for s in args.suites.split(",") if s] if args.suites else None
    tables = compare(dirs, suites)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for name, diffs in zip(names[1:], tables):
    if args.json:
      for suite, d in diffs.items():
        rows = dict(d["categories"])
        if "overall" in d:
          rows["overall"] = d["overall"]
        for cat, v in rows.items():
          print(json.dumps({"a": names[0], "b": name, "suite": suite, "category": cat, **v}))
    else:
      print(results.comparison_table(diffs, names[0], name) if diffs else "(no common suite)")
      print()
  return 0
