"""glibc malloc settings (`TUNABLES`: one arena, no mmap'ed blocks, no trimming) vs glibc's
defaults on XLA's CPU backend: compile seconds, seconds and page faults per call of the tiny
update and of a tiny warm-start step.

  python benchmarks/host_malloc.py [--rounds 3] [--reps 5]

glibc reads its tunables at process start, so each measurement is a child process; the parent
alternates the two settings for ``--rounds`` rounds (machine-speed drift hits both alike). Each
child builds ``experiments/configs/tiny.py``'s shapes (random tokens, full loss masks) and
times the first call (compile) and then ``--reps`` calls of: the iteration's update on a replay step (``G * P``
agent rows of ``agent.max_context`` slots), and one warm-start step (a batch of designer rows
and a batch of agent rows at the warm start's padded lengths). Page faults are the child's
minor faults (``getrusage``) over the timed calls. Prints per setting the median over rounds
and the ratios tunables / defaults.

XLA's CPU runtime mallocs each call's buffers and frees them at its end; with glibc's defaults
the per-thread arenas are trimmed and large blocks unmapped, so every call faults its memory in
again. The tunables stop that (glibc reads them only at process start: ``GLIBC_TUNABLES=...
python experiments/run.py ...``), but they slow XLA's compiler down (BUILD_NOTES, stop 15), so
the launcher does not set them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TUNABLES = ":".join(
  (
    "glibc.malloc.arena_max=1",  # one arena: freed blocks are reused by every thread
    "glibc.malloc.mmap_max=0",  # no mmap'ed blocks (unmapped on free, faulted in on reuse)
    "glibc.malloc.trim_threshold=68719476736",  # never hand the heap's top back to the kernel
  )
)


def child(reps: int) -> None:
  sys.path.insert(0, str(REPO))
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import functools
  import resource
  import time

  import jax
  import tiny

  from benchmarks.tiny_update import rows
  from spade_jax import trajectories
  from spade_jax.rl.optimizer import learning_rate_schedule, make_optimizer
  from spade_jax.rl.update import train_step
  from spade_jax.tiny.train import TinySetup

  setup = TinySetup(tiny.get_config(""))
  graphdef, state, _ = setup.init_state()
  spec, ws = setup.spec, setup.config.warm_start
  step_fn = jax.jit(
    functools.partial(
      train_step, graphdef, make_optimizer(spec.opt), learning_rate_schedule(spec.opt), spec.loss
    )
  )
  A, D = trajectories.ROLE_AGENT, trajectories.ROLE_DESIGNER
  work = {
    "update": [(rows(spec.num_games * spec.plays, spec.rollout.max_context, A, True, 1),)],
    # the warm start's padded lengths for the default config (BUILD_NOTES, stop 14)
    "warm_step": [rows(ws.batch, 48, A, True, 2), rows(max(1, ws.batch // 4), 192, D, True, 3)],
  }
  out = {}
  for name, batches in work.items():
    t = time.perf_counter()
    for b in batches:
      jax.block_until_ready(step_fn(state, b))
    compile_s = time.perf_counter() - t
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(reps):
      t = time.perf_counter()
      for b in batches:
        jax.block_until_ready(step_fn(state, b))
      times.append(time.perf_counter() - t)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    out[name] = {"s": float(np.median(times)), "faults": faults / reps, "compile_s": compile_s}
  print(json.dumps(out))


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child:
    child(args.reps)
    return
  base = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
  settings = {"defaults": base, "tunables": dict(base, GLIBC_TUNABLES=TUNABLES)}
  results = {name: [] for name in settings}
  for _ in range(args.rounds):
    for name, env in settings.items():
      cmd = [sys.executable, __file__, "--child", "--reps", str(args.reps)]
      res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
      results[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
  med = {
    name: {
      work: {k: float(np.median([r[work][k] for r in runs])) for k in ("s", "faults", "compile_s")}
      for work in runs[0]
    }
    for name, runs in results.items()
  }
  for name, works in med.items():
    for work, m in works.items():
      print(
        f"{name:9s} {work:9s} compile {m['compile_s']:6.1f} s  {m['s'] * 1e3:8.1f} ms"
        f"  {m['faults']:10.0f} page faults / call"
      )
  for work in med["defaults"]:
    ratio = {k: med["tunables"][work][k] / med["defaults"][work][k] for k in ("s", "compile_s")}
    print(
      f"ratio tunables / defaults, {work}: call {ratio['s']:.2f}, compile {ratio['compile_s']:.2f}"
    )


if __name__ == "__main__":
  main()
