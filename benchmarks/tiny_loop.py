"""Throughput of the tiny on-device SPADE iteration: iterations/s and environment steps/s.

  python benchmarks/tiny_loop.py [--config-arg ""] [--reps 5]

Builds the run of ``experiments/configs/tiny.py[:ARG]`` (no warm start: throughput does not
depend on the weights' quality beyond episode lengths), compiles both iteration variants
(regeneration: design + hinted and unhinted plays + update; replay: unhinted plays + update),
then times ``--reps`` calls of each, alternating. Reports compile seconds, the median seconds
per iteration of each variant, iterations/s of a regeneration cycle and environment steps/s
(assistant turns played, from the iteration's own counter).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spade_jax import xla_cpu  # noqa: E402

xla_cpu.setup()  # before jax starts: time the numerics experiments/run.py uses

import jax  # noqa: E402

from benchmarks.common import tiny_setup  # noqa: E402
from spade_jax.tiny import iteration  # noqa: E402


def main() -> None:
  args, config, setup = tiny_setup(__doc__, reps=5)
  graphdef, state, carry = setup.init_state()
  W = config.spade.regen_interval

  def call(step, regen):
    nonlocal state, carry
    inputs = jax.device_put(setup.inputs(step, None))
    t = time.perf_counter()
    with jax.transfer_guard("disallow"):
      state, carry, out = iteration.iterate(
        graphdef, state, carry, inputs, spec=setup.spec, regen=regen
      )
    out = jax.device_get(out)
    return time.perf_counter() - t, out

  compile_s = {}
  for regen, step in ((True, 0), (False, 1)):
    compile_s[regen], _ = call(step, regen)
  times = {True: [], False: []}
  env_steps = {True: [], False: []}
  for r in range(args.reps):
    for regen in (True, False):
      step = (r + 1) * W + (0 if regen else 1)
      dt, out = call(step, regen)
      times[regen].append(dt)
      env_steps[regen].append(out["perf/env_steps"] / dt)
  med = {k: statistics.median(v) for k, v in times.items()}
  cycle = med[True] + (W - 1) * med[False]
  print(
    f"backend {jax.default_backend()}, config tiny:{args.config_arg or 'default'}, reps {args.reps}"
  )
  print(f"compile s: regen {compile_s[True]:.1f}, replay {compile_s[False]:.1f}")
  print(f"median s/iteration: regen {med[True]:.2f}, replay {med[False]:.2f}")
  print(f"iterations/s (regen interval {W}): {W / cycle:.3f}")
  for regen in (True, False):
    name = "regen" if regen else "replay"
    print(f"env steps/s ({name}): {statistics.median(env_steps[regen]):.0f}")


if __name__ == "__main__":
  main()
