"""What capping XLA's CPU instruction set (`spade_jax.xla_cpu`) does to numbers and speed.

  python benchmarks/xla_cpu_isa.py [--isas native,AVX2,SSE4_2] [--reps 3] [--config-arg ""]

For each instruction set, side by side in one run, a child process (XLA_FLAGS must be set
before jax starts) builds the tiny run of ``experiments/configs/tiny.py[:ARG]``, runs one
warm-start step (its first agent and designer NLLs: the numbers that differ between machines)
and then times ``--reps`` calls of each tiny iteration variant (regeneration, replay) after
compiling them. ``native`` is the host's full instruction set (``SPADE_NATIVE_CPU_ISA=1``).
Prints one JSON object per instruction set, then the median-time ratios to the first one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(config_arg: str, reps: int) -> dict:
  sys.path.insert(0, str(REPO))
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import jax
  import tiny

  from spade_jax.tiny import iteration
  from spade_jax.tiny.setup import TinySetup
  from spade_jax.tiny.warmstart import warm_start

  config = tiny.get_config(config_arg)
  config.warm_start.steps = 1
  setup = TinySetup(config)
  graphdef, state, carry = setup.init_state()
  state, warm = warm_start(graphdef, state, setup)
  state, carry = jax.device_put((state, carry), jax.devices()[0])
  times = {True: [], False: []}
  W = config.spade.regen_interval
  for step in range(reps * W + 1):  # the first call of each variant compiles it
    regen = step % W == 0
    inputs = jax.device_put(setup.inputs(step, None), jax.devices()[0])
    t = time.perf_counter()
    state, carry, out = iteration.iterate(
      graphdef, state, carry, inputs, spec=setup.spec, regen=regen
    )
    jax.block_until_ready(out)
    times[regen].append(time.perf_counter() - t)
  return {
    "designer_nll_first": warm["warm/designer_nll_first"],
    "agent_nll_first": warm["warm/agent_nll_first"],
    "regen_s": statistics.median(times[True][1:]),
    "replay_s": statistics.median(times[False][1:] or times[False]),
  }


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--isas", default="native,AVX2,SSE4_2")
  p.add_argument("--reps", type=int, default=3)
  p.add_argument("--config-arg", default="")
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.child:
    print(json.dumps(child(args.config_arg, args.reps)))
    return
  results = {}
  for isa in args.isas.split(","):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "SPADE_NATIVE_CPU_ISA")}
    if isa == "native":
      env["SPADE_NATIVE_CPU_ISA"] = "1"
    else:
      env["XLA_FLAGS"] = f"--xla_cpu_max_isa={isa}"
    cmd = [sys.executable, __file__, "--child", "--reps", str(args.reps)]
    cmd += ["--config-arg", args.config_arg]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    results[isa] = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps({"isa": isa, **results[isa]}), flush=True)
  first = next(iter(results.values()))
  for isa, r in results.items():
    ratios = {k: round(r[k] / first[k], 3) for k in ("regen_s", "replay_s")}
    print(json.dumps({"isa": isa, "time_ratio_to_" + next(iter(results)): ratios}))


if __name__ == "__main__":
  main()
