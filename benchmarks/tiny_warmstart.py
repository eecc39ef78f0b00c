"""Cost of the tiny warm start's supervised steps: padded tokens and seconds per step.

  python benchmarks/tiny_warmstart.py [--config-arg ""] [--reps 7]

Builds the warm start's rows of ``experiments/configs/tiny.py[:ARG]`` (designer examples and
oracle episodes; random weights, which the scripted oracle does not use) in two layouts and
times one supervised step (`rl.update.train_step`, the warm start's step) of each row kind,
alternating, side by side in one process:

* ``seeded+32``: designer rows with memory-seeded prompts as well, every row kind padded to a
  multiple of 32 tokens (the warm start of stop 13);
* ``plain+16``: the current warm start with the loop's memory off (plain designer prompts only,
  padding to a multiple of 16).

Prints, per layout and row kind, the row count, the padded length, the batch and the median
seconds per step; then the ratio of the two layouts' seconds per warm-start step (one agent
batch plus one designer batch, as `warmstart.warm_start` runs them).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.common import median_time, tiny_setup  # noqa: E402
from spade_jax.tiny import warmstart  # noqa: E402
from spade_jax.tiny.train import TinySetup  # noqa: E402


def main() -> None:
  args, config, setup = tiny_setup(__doc__, reps=7)
  graphdef, state, _ = setup.init_state()
  episodes = warmstart.agent_examples(graphdef, state.params, setup, config.seed)
  seeded = config.copy_and_resolve_references()
  seeded.spade.memory = True
  layouts = {
    "seeded+32": (warmstart.designer_examples(TinySetup(seeded)), 32),
    "plain+16": (warmstart.designer_examples(setup), 16),
  }
  step, optimizer = warmstart.sft_step(graphdef, setup)
  step_fn = jax.jit(step)
  warm = state.replace(opt_state=optimizer.init(state.params))
  rng = np.random.default_rng(0)
  batches = {}
  sizes = warmstart.batch_sizes(config)
  for name, (designer, bucket) in layouts.items():
    d_rows, a_rows = warmstart.sft_rows(designer, episodes, bucket)
    for kind, rows, n in zip(("agent", "designer"), (a_rows, d_rows), sizes, strict=True):
      idx = rng.choice(rows.batch_size, size=n, replace=rows.batch_size < n)
      batches[name, kind] = (rows.batch_size, rows.select(idx))
  times = {k: [] for k in batches}
  for _ in range(args.reps):  # alternate layouts so machine-speed drift hits both alike
    for key, (_, batch) in batches.items():
      times[key].append(median_time(lambda b=batch: step_fn(warm, b), warmup=1, repeats=3))
  per_step = {}
  for (name, kind), (n_rows, batch) in batches.items():
    t = float(np.median(times[name, kind]))
    per_step[name] = per_step.get(name, 0.0) + t
    b, T = batch.tokens_BT.shape
    print(f"{name:10s} {kind:8s} rows {n_rows:4d}  length {T:4d}  batch {b:3d}  {t * 1e3:7.1f} ms")
  for name, t in per_step.items():
    print(f"{name:10s} warm-start step (agent + designer batch): {t * 1e3:.1f} ms")
  print(f"ratio plain+16 / seeded+32: {per_step['plain+16'] / per_step['seeded+32']:.2f}")


if __name__ == "__main__":
  main()
