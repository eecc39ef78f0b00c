"""Metrics: ``metrics.jsonl`` + TensorBoard (+ wandb when configured and installed), a one-step-
late device fetch, and a progress bar with ETA.

Keys are slash-named ``section/name`` (``train/loss``, ``perf/tokens_per_s``, ``agent/solve_rate``)
so TensorBoard groups them and downstream tools can split on the first slash. Only process 0
writes. Each ``metrics.jsonl`` line is ``{"step": int, <key>: float | null, ...}``; non-finite
values are written as ``null`` (JSON has no NaN) and logged as-is to TensorBoard.

:class:`DeferredMetrics` keeps the device arrays of step ``k`` and converts them to host floats
only after step ``k + 1`` has been dispatched, so logging never stalls the device pipeline.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from spade_jax import multihost

_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-@]+)+$")


def check_key(key: str) -> str:
  if not isinstance(key, str) or not _KEY_RE.match(key):
    raise ValueError(f"metric key {key!r} must be slash-named like 'train/loss'")
  return key


def to_host(metrics: Mapping[str, Any]) -> dict[str, float]:
  """Device (or numpy / python) scalars -> python floats (blocks until they are ready)."""
  fetched = multihost.to_host(dict(metrics))
  return {k: float(np.asarray(v)) for k, v in fetched.items()}


def probe_matmul_peak(dtype="float32", sizes=(1024, 2048), reps: int = 5) -> float:
  """Measured matmul FLOP/s of this machine's default device: the best median time of square
  ``n x n @ n x n`` products in ``dtype`` (f32 accumulation). The denominator of ``perf/mfu``."""
  import statistics

  import jax.numpy as jnp

  best = 0.0
  f = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
  for n in sizes:
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32).astype(dtype)
    jax.block_until_ready(f(a, b))
    times = []
    for _ in range(reps):
      t = time.perf_counter()
      jax.block_until_ready(f(a, b))
      times.append(time.perf_counter() - t)
    best = max(best, 2 * n**3 / statistics.median(times))
  return best


def throughput(
  tokens: float,
  seconds: float,
  *,
  model_flops: float | None = None,
  peak_flops: float | None = None,
) -> dict[str, float]:
  """``perf/tokens_per_s`` and, given the step's model FLOPs and a peak, ``perf/mfu``."""
  out = {"perf/tokens_per_s": tokens / max(seconds, 1e-12)}
  if model_flops is not None and peak_flops:
    out["perf/mfu"] = model_flops / max(seconds, 1e-12) / peak_flops
  return out


class MetricsWriter:
  """Appends one JSON line per logged step to ``workdir/metrics.jsonl`` and mirrors scalars to
  TensorBoard (``workdir/tb``) and, when ``wandb_project`` is set and wandb is importable, to
  wandb. On processes other than 0 every method is a no-op."""

  def __init__(
    self,
    workdir: str | os.PathLike,
    *,
    tensorboard: bool = True,
    wandb_project: str | None = None,
    wandb_config: Mapping[str, Any] | None = None,
    run_name: str | None = None,
  ):
    self.workdir = os.fspath(workdir)
    self.active = jax.process_index() == 0
    self._tb = None
    self._wandb = None
    self._file = None
    if not self.active:
      return
    os.makedirs(self.workdir, exist_ok=True)
    self.path = os.path.join(self.workdir, "metrics.jsonl")
    self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 (closed in close())
    if tensorboard:
      from tensorboardX import SummaryWriter

      self._tb = SummaryWriter(os.path.join(self.workdir, "tb"))
    if wandb_project:
      try:
        import wandb
      except ImportError:
        wandb = None
      if wandb is not None:
        self._wandb = wandb.init(
          project=wandb_project,
          name=run_name,
          dir=self.workdir,
          config=dict(wandb_config or {}),
          resume="allow",
        )

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    """Logs ``metrics`` (scalars; device arrays are fetched) at ``step``. Every process
    fetches (a fetch may be a collective, `multihost.to_host`); process 0 writes."""
    values = to_host({check_key(k): v for k, v in metrics.items()})
    if not self.active:
      return
    record = {"step": int(step)}
    record.update({k: (v if math.isfinite(v) else None) for k, v in sorted(values.items())})
    self._file.write(json.dumps(record) + "\n")
    if self._tb is not None:
      for k, v in values.items():
        self._tb.add_scalar(k, v, int(step))
    if self._wandb is not None:
      self._wandb.log(values, step=int(step))

  def flush(self) -> None:
    if self._file is not None:
      self._file.flush()
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None
    if self._tb is not None:
      self._tb.close()
      self._tb = None
    if self._wandb is not None:
      self._wandb.finish()
      self._wandb = None

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
  """The records of a ``metrics.jsonl`` file (for tests, plots, notebooks and reports); a line
  that does not parse (the torn last line of a run being written or killed) is dropped."""
  rows = []
  with open(path) as f:
    for line in f:
      if line.strip():
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError:
          continue
  return rows


class DeferredMetrics:
  """Fetches device metrics one step late.

  ``push(step, device_metrics)`` stores this step's (still running) device arrays and returns
  the *previous* step's metrics converted to host floats — by then the next step is already
  enqueued, so the conversion overlaps with device work. ``flush()`` returns the last pending
  step. Both return ``None`` when there is nothing to report.
  """

  def __init__(self):
    self._pending: tuple[int, Mapping[str, Any], dict[str, float]] | None = None

  def push(
    self,
    step: int,
    device_metrics: Mapping[str, Any],
    host_metrics: Mapping[str, float] | None = None,
  ):
    """``host_metrics`` (already on the host, e.g. timings) travel with the step's metrics."""
    previous = self.flush()
    self._pending = (int(step), dict(device_metrics), dict(host_metrics or {}))
    return previous

  def flush(self) -> tuple[int, dict[str, float]] | None:
    if self._pending is None:
      return None
    step, device, host = self._pending
    self._pending = None
    out = to_host(device)
    out.update({k: float(v) for k, v in host.items()})
    return step, out


class ProgressBar:
  """A tqdm bar over training steps with ETA and a few chosen metrics in its postfix; disabled
  off process 0 or when ``enabled`` is False (e.g. under a log-file-only launcher)."""

  def __init__(
    self,
    total: int,
    *,
    initial: int = 0,
    keys: tuple[str, ...] = ("train/loss",),
    enabled: bool = True,
    desc: str = "train",
  ):
    from tqdm.auto import tqdm

    self.keys = keys
    self.total, self.initial, self.n = total, initial, initial
    self._bar = tqdm(
      total=total,
      initial=initial,
      desc=desc,
      dynamic_ncols=True,
      disable=not enabled or jax.process_index() != 0,
      smoothing=0.1,
    )
    self._start = time.monotonic()

  def update(self, n: int = 1, metrics: Mapping[str, float] | None = None) -> None:
    self.n += n
    if metrics:
      shown = {k.split("/", 1)[-1]: f"{metrics[k]:.4g}" for k in self.keys if k in metrics}
      self._bar.set_postfix(shown, refresh=False)
    self._bar.update(n)

  @property
  def eta_s(self) -> float | None:
    """Estimated seconds to completion from the average rate so far (None before any step)."""
    done = self.n - self.initial
    if done <= 0:
      return None
    rate = done / max(time.monotonic() - self._start, 1e-9)
    return max(self.total - self.n, 0) / rate

  def close(self) -> None:
    self._bar.close()
