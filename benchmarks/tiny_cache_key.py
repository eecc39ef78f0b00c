"""Does an iteration compiled ahead of time in one process serve the run's jitted call in another?

  python benchmarks/tiny_cache_key.py [--config-arg smoke] [--uncommitted-inputs]

Two child processes share a fresh persistent compilation cache. The first lowers the
regeneration variant of `tiny.iteration.iterate` from `ShapeDtypeStruct`s (shapes, dtypes and
shardings of the placed state, carry and step inputs) and compiles it; the second calls the
jitted `iterate` on the arrays, as `train_tiny` does. Each prints its seconds and its
persistent-cache hits / misses. ``--uncommitted-inputs`` passes the step inputs as
``jax.device_put`` without a device (uncommitted), as `train_tiny` did before stop 17.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def child(mode: str, cache: str, argv: list[str]) -> None:
  import jax

  jax.config.update("jax_compilation_cache_dir", cache)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 1)
  from benchmarks.common import tiny_setup
  from spade_jax.tiny import iteration
  from spade_jax.tiny.train import place

  events = collections.Counter()
  jax.monitoring.register_event_listener(lambda event, *_, **__: events.update([event]))
  _, _, setup = tiny_setup(__doc__, argv=argv)
  graphdef, state, carry = setup.init_state()
  state, carry = place((state, carry))
  raw = setup.inputs(0, None)
  inputs = jax.device_put(raw) if "--uncommitted-inputs" in sys.argv else place(raw)
  t = time.perf_counter()
  if mode == "aot":
    shape = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)  # noqa: E731
    args = jax.tree.map(shape, (state, carry, inputs))
    iteration.iterate.lower(graphdef, *args, spec=setup.spec, regen=True).compile()
  else:
    out = iteration.iterate(graphdef, state, carry, inputs, spec=setup.spec, regen=True)
    jax.block_until_ready(out)
  hits = events["/jax/compilation_cache/cache_hits"]
  misses = events["/jax/compilation_cache/cache_misses"]
  print(f"{mode}: {time.perf_counter() - t:.1f} s, persistent cache hits {hits}, misses {misses}")


def main() -> None:
  argv = [a for a in sys.argv[1:] if a != "--uncommitted-inputs"]
  if argv[:1] == ["--child"]:
    child(argv[1], argv[2], argv[3:])
    return
  with tempfile.TemporaryDirectory() as cache:
    for mode in ("aot", "jit"):
      cmd = [sys.executable, __file__, "--child", mode, cache, *argv]
      if "--uncommitted-inputs" in sys.argv:
        cmd.append("--uncommitted-inputs")
      subprocess.run(cmd, check=True)


if __name__ == "__main__":
  main()
