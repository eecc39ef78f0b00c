"""The tiny warm start's supervised phase: one jitted call per batch vs one ``lax.scan``.

  python benchmarks/tiny_warmstart_scan.py [--config-arg ""] [--steps 40] [--reps 3]

Builds the warm start's rows of ``experiments/configs/tiny.py[:ARG]`` (designer examples and
oracle episodes; random weights, which the scripted oracle does not use) and runs ``--steps``
supervised steps (one agent batch and one designer batch each, the indices of
`warmstart.draw_indices`) two ways, alternating, side by side in one process:

* ``per-batch``: the loop of stop 18 and before, one jitted `rl.update.train_step` call per
  batch, rows selected on the host;
* ``scan``: `warmstart.sft_steps`, all steps in one jitted call, rows gathered on device.

Prints the median seconds per warm-start step of each (compile excluded: one warmup call
each), their ratio, and whether the two give the same parameters and NLL series (max abs
difference).
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.common import tiny_setup  # noqa: E402
from spade_jax.tiny import warmstart  # noqa: E402


def main() -> None:
  args, config, setup = tiny_setup(
    __doc__, reps=3, extra=lambda p: p.add_argument("--steps", type=int, default=40)
  )
  graphdef, state, _ = setup.init_state()
  episodes = warmstart.agent_examples(graphdef, state.params, setup, config.seed)
  d_rows, a_rows = warmstart.sft_rows(warmstart.designer_examples(setup), episodes)
  kinds = tuple(zip((a_rows, d_rows), warmstart.batch_sizes(config), strict=True))
  idx = warmstart.draw_indices(config.seed, args.steps, [(r.batch_size, n) for r, n in kinds])
  step, optimizer = warmstart.sft_step(graphdef, setup)
  warm = state.replace(opt_state=optimizer.init(state.params))
  step_fn = jax.jit(step)
  scan_fn = jax.jit(functools.partial(warmstart.sft_steps, step))
  rows_dev = jax.device_put(tuple(r for r, _ in kinds))
  idx_dev = jax.device_put(idx)

  def per_batch():
    s, nll = warm, ([], [])
    for t in range(args.steps):
      for k, (r, _) in enumerate(kinds):
        s, m = step_fn(s, r.select(idx[k][t]))
        nll[k].append(m["train/nll"])
    return jax.block_until_ready((s, tuple(jnp.stack(v) for v in nll)))

  def scan():
    return jax.block_until_ready(scan_fn(warm, rows_dev, idx_dev))

  runs = {"per-batch": per_batch, "scan": scan}
  out = {name: fn() for name, fn in runs.items()}  # warmup (compile) and the results compared
  times = {name: [] for name in runs}
  for _ in range(args.reps):  # alternate so machine-speed drift hits both alike
    for name, fn in runs.items():
      t0 = time.perf_counter()
      fn()
      times[name].append((time.perf_counter() - t0) / args.steps)
  for name, t in times.items():
    print(f"{name:10s} {np.median(t) * 1e3:8.1f} ms per warm-start step ({args.steps} steps)")
  print(f"ratio scan / per-batch: {np.median(times['scan']) / np.median(times['per-batch']):.2f}")
  diff = jax.tree.map(
    lambda a, b: float(jnp.max(jnp.abs(jnp.asarray(a, jnp.float32) - b))),
    out["per-batch"],
    out["scan"],
  )
  params = max(jax.tree.leaves(diff[0].params))
  nll = max(jax.tree.leaves(diff[1]))
  print(f"max abs difference: params {params:.3g}, nll {nll:.3g}")


if __name__ == "__main__":
  main()
