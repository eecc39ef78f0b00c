"""Size and compile time of the tiny iteration's two jitted variants.

  python benchmarks/tiny_compile.py [--config-arg ""]

Lowers `tiny.iteration.iterate` for the regeneration and the replay variant of
``experiments/configs/tiny.py[:ARG]`` (random weights) and prints, per variant, the seconds to
trace and lower, the StableHLO text's size in lines, and the seconds to compile it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402

from benchmarks.common import tiny_setup  # noqa: E402
from spade_jax.tiny import iteration  # noqa: E402


def main() -> None:
  _, _, setup = tiny_setup(__doc__)
  graphdef, state, carry = setup.init_state()
  inputs = jax.device_put(setup.inputs(0, None))
  for regen in (True, False):
    t0 = time.perf_counter()
    lowered = iteration.iterate.lower(graphdef, state, carry, inputs, spec=setup.spec, regen=regen)
    t1 = time.perf_counter()
    lines = lowered.as_text().count("\n")
    t2 = time.perf_counter()
    lowered.compile()
    t3 = time.perf_counter()
    name = "regen" if regen else "replay"
    print(f"{name}: trace+lower {t1 - t0:.1f} s, {lines} StableHLO lines, compile {t3 - t2:.1f} s")


if __name__ == "__main__":
  main()
