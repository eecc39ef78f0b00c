"""Shared benchmark helpers: timing medians, the matmul-peak probe (measured in each run) and the
command line + setup of the tiny-config benchmarks (`tiny_loop.py`)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp


def median_time(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 7) -> float:
  """Median wall time of ``fn()`` (blocked until ready) after ``warmup`` calls."""
  for _ in range(warmup):
    jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def matmul_peak(n: int = 2048, dtype=jnp.float32, repeats: int = 7) -> float:
  """Achievable matmul FLOP/s on the default device, probed with an n x n x n product."""
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  f = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
  t = median_time(lambda: f(a, b), repeats=repeats)
  return 2 * n**3 / t


def tiny_setup(
  doc: str,
  reps: int | None = None,
  argv: list[str] | None = None,
  extra: Callable[[argparse.ArgumentParser], object] | None = None,
):
  """Parse ``--config-arg`` (and ``--reps`` when given its default, and whatever ``extra``
  adds to the parser) and build the `TinySetup` of ``experiments/configs/tiny.py[:ARG]``.
  Returns ``(args, config, setup)``."""
  ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
  ap.add_argument("--config-arg", default="", help="the tiny config's argument, e.g. smoke")
  if reps is not None:
    ap.add_argument("--reps", type=int, default=reps)
  if extra is not None:
    extra(ap)
  args = ap.parse_args(argv)
  configs = str(Path(__file__).resolve().parents[1] / "experiments" / "configs")
  if configs not in sys.path:
    sys.path.insert(0, configs)
  import tiny

  from spade_jax.tiny.setup import TinySetup

  config = tiny.get_config(args.config_arg)
  return args, config, TinySetup(config)
