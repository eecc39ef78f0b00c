"""First-quarter vs last-quarter trends of a recorded tiny SPADE run.

  python benchmarks/tiny_trends.py runs/tiny [--check]

Reads ``RUN/metrics.jsonl`` and prints, for each series, the mean over the first and the last
quarter of the steps that logged it: held-out accuracy (``eval/accuracy``), the agent's solve
rate on the current pools, the designer's valid rate, and the two difficulty proxies of the
designer's pools (``designer/difficulty_bits``: bits of task randomness of valid programs;
``designer/difficulty``: unhinted failure rate of each new pool for the current agent;
``designer/difficulty_ref``: its failure rate for the frozen warm-started policy, a yardstick
that does not learn). ``--check`` exits 1 unless the designer wrote valid programs at the
first step, held-out accuracy rose, and the designer's pools got harder: ``difficulty_ref``
rose (runs that log it), else bits or failure rate rose (the acceptance trends of the tiny
reproduction). A series "rose" when its last-quarter mean exceeds its first-quarter mean by
more than one standard error of that difference (``stderr``, from the spread of the values
in each quarter), so a change within pool-to-pool noise does not pass.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spade_jax import metrics  # noqa: E402

SERIES = (
  "eval/accuracy",
  "agent/solve_rate",
  "agent/solve_rate_hint",
  "designer/valid_rate",
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


def trends(path: Path) -> dict:
  rows = metrics.read_metrics(path)
  out = {"steps": len(rows)}
  for key in SERIES:
    fl = quarters(rows, key)
    if fl is not None:
      out[key] = {
        "first_quarter": round(fl[0], 4),
        "last_quarter": round(fl[1], 4),
        "stderr": round(fl[2], 4),
      }
  first = [r for r in rows if r.get("designer/valid_rate") is not None]
  out["first_valid_rate"] = first[0]["designer/valid_rate"] if first else None
  return out


def check(t: dict) -> list[str]:
  failures = []
  if not t.get("first_valid_rate"):
    failures.append("no valid designer program at the first regeneration")
  # a rise counts when it exceeds one standard error of the difference (pool-to-pool noise)
  rise = lambda k: k in t and t[k]["last_quarter"] - t[k]["first_quarter"] > t[k].get("stderr", 0)
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
  args = ap.parse_args()
  path = Path(args.run)
  path = path if path.suffix == ".jsonl" else path / "metrics.jsonl"
  t = trends(path)
  print(json.dumps(t, indent=1))
  if args.check:
    failures = check(t)
    for f in failures:
      print(f"FAIL: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
  main()
