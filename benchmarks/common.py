"""Shared benchmark helpers: timing medians and the matmul-peak probe (measured in each run)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

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
