"""Designer-reward ablation of the tiny on-device SPADE loop, at equal compute.

  python -m spade_jax.tiny.analysis.ablation        # all variants, 3 seeds
  python -m spade_jax.tiny.analysis.ablation --variants regret,fixed --seeds 0,1 --steps 40 \
    --jobs 2

Every (variant, seed) is one run of ``experiments/configs/tiny.py:reward=V,seed=S`` with the
same steps, pool size, plays and warm start (equal compute; ``fixed`` = the random library
pool baseline: no designer sampling, no designer training). Runs go to ``--out/V_sS`` (a rerun
resumes/skips finished runs). The table reports the held-out accuracy after the last step
(mean ± std over seeds), its change from step 0 (after the warm start, before any SPADE step),
the final difficulty proxies of the designer's pools (bits of task randomness of valid
programs; unhinted failure rate of each new pool for the current agent and for the frozen
warm-started policy) and the designer's valid rate, each averaged
over the last quarter of the run's regeneration steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from spade_jax import metrics

REPO = Path(__file__).resolve().parents[3]  # experiments/run.py, runs/

VARIANTS = ("regret", "blend", "solve_rate", "learning_potential", "learnability", "fixed")


def run_one(variant: str, seed: int, steps: int, out: Path, extra: list[str]) -> Path:
  workdir = out / f"{variant}_s{seed}"
  cmd = [
    sys.executable,
    str(REPO / "experiments" / "run.py"),
    f"--config={REPO}/experiments/configs/tiny.py:reward={variant},seed={seed}",
    f"--workdir={workdir}",
    f"--config.steps={steps}",
    "--config.progress=False",
    *extra,
  ]
  env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", ""))
  subprocess.run(cmd, check=True, env=env)
  return workdir


def summarise(workdir: Path) -> dict:
  rows = metrics.read_metrics(workdir / "metrics.jsonl")
  evals = [r for r in rows if r.get("eval/accuracy") is not None]
  regen = [r for r in rows if r.get("designer/difficulty") is not None]
  last_q = regen[-max(1, len(regen) // 4) :]

  def mean(key, rs):
    vals = [r[key] for r in rs if r.get(key) is not None]
    return float(np.mean(vals)) if vals else float("nan")

  return {
    "heldout_final": evals[-1]["eval/accuracy"] if evals else float("nan"),
    "heldout_first": evals[0]["eval/accuracy"] if evals else float("nan"),
    "bits": mean("designer/difficulty_bits", last_q),
    "difficulty": mean("designer/difficulty", last_q),
    "difficulty_ref": mean("designer/difficulty_ref", last_q),
    "valid_rate": mean("designer/valid_rate", last_q),
    "solve_rate": mean("agent/solve_rate", last_q),
  }


def table(results: dict) -> str:
  lines = [
    "| designer reward | held-out acc. (final) | change from step 0 | difficulty bits "
    "| pool failure rate | failure rate, frozen policy | designer valid rate | seeds |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for variant, runs in results.items():
    acc = np.array([r["heldout_final"] for r in runs])
    gain = np.array([r["heldout_final"] - r["heldout_first"] for r in runs])
    bits = np.array([r["bits"] for r in runs])
    diff = np.array([r["difficulty"] for r in runs])
    ref = np.array([r.get("difficulty_ref", float("nan")) for r in runs])
    valid = np.array([r["valid_rate"] for r in runs])
    fmt = lambda a: f"{np.nanmean(a):.3f} ± {np.nanstd(a):.3f}"
    valid_s = "n/a (no designer)" if variant == "fixed" else fmt(valid)
    lines.append(
      f"| {variant} | {fmt(acc)} | {fmt(gain)} | {fmt(bits)} | {fmt(diff)} | {fmt(ref)} "
      f"| {valid_s} "
      f"| {len(runs)} |"
    )
  return "\n".join(lines)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--variants", default=",".join(VARIANTS))
  ap.add_argument("--seeds", default="0,1,2")
  ap.add_argument("--steps", type=int, default=60)
  ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (each uses all cores)")
  ap.add_argument("--out", default=str(REPO / "runs" / "ablation"))
  ap.add_argument("extra", nargs="*", help="more --config.x=y overrides for every run")
  args = ap.parse_args()
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  variants = [v for v in args.variants.split(",") if v]
  seeds = [int(s) for s in args.seeds.split(",") if s]
  jobs = [(v, s) for v in variants for s in seeds]
  with ThreadPoolExecutor(max_workers=args.jobs) as ex:
    dirs = list(ex.map(lambda vs: run_one(vs[0], vs[1], args.steps, out, args.extra), jobs))
  results: dict[str, list] = {}
  for (v, _), d in zip(jobs, dirs):
    results.setdefault(v, []).append(summarise(d))
  (out / "summary.json").write_text(json.dumps(results, indent=1))
  print(f"tiny SPADE ablation: {args.steps} steps, seeds {seeds}\n")
  print(table(results))


if __name__ == "__main__":
  main()
