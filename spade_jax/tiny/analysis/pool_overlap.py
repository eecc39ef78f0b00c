"""How often two tiny runs wrote the same program into the same pool slot.

  python -m spade_jax.tiny.analysis.pool_overlap RUN_A RUN_B [--max-step N]

Reads the environment records (``RUN/envs/step*_game*.json``) of two runs with the same seed
and prints, over the (step, game) slots both recorded (up to ``--max-step``), how many hold
the same program text. Runs that differ only in the designer's reward sample with the same
keys, so the count says how far the reward moved the designer's samples: all slots equal
means its updates changed nothing it wrote.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def programs(run: Path) -> dict[tuple[int, int], str]:
  out = {}
  for f in sorted((run / "envs").glob("step*_game*.json")):
    r = json.loads(f.read_text())
    out[(r["step"], r["game"])] = r["program"]
  return out


def overlap(a: dict, b: dict, max_step: int | None = None) -> tuple[int, int]:
  """``(same, common)``: slots with identical program text, slots both runs recorded."""
  keys = [k for k in a if k in b and (max_step is None or k[0] <= max_step)]
  return sum(a[k] == b[k] for k in keys), len(keys)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("run_a", type=Path)
  p.add_argument("run_b", type=Path)
  p.add_argument("--max-step", type=int, default=None)
  args = p.parse_args(argv)
  same, common = overlap(programs(args.run_a), programs(args.run_b), args.max_step)
  print(json.dumps({"same_program": same, "slots": common}))


if __name__ == "__main__":
  main()
