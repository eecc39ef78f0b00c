"""Metrics writer (JSONL + TensorBoard), one-step-late device fetch, progress bar."""

import glob
import json
import math
import os
import struct
import sys
import time

import jax.numpy as jnp
import pytest

from spade_jax import metrics


def _tb_scalars(logdir):
  """(tag, step, value) triples read back from the TFRecord event files under logdir."""
  from tensorboardX.proto import event_pb2

  out = set()
  for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
      (length,) = struct.unpack("<Q", data[pos : pos + 8])
      event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
      pos += 12 + length + 4  # length, length crc, payload, payload crc
      for v in event.summary.value:
        out.add((v.tag, event.step, v.simple_value))
  return out


def test_writer_jsonl_and_tensorboard(tmp_path):
  with metrics.MetricsWriter(tmp_path) as w:
    w.write(1, {"train/loss": jnp.float32(0.5), "perf/tokens_per_s": 1000})
    w.write(2, {"train/loss": 0.25, "train/grad_norm": float("nan")})
  records = metrics.read_metrics(tmp_path / "metrics.jsonl")
  assert records == [
    {"step": 1, "perf/tokens_per_s": 1000.0, "train/loss": 0.5},
    {"step": 2, "train/grad_norm": None, "train/loss": 0.25},  # NaN -> null (valid JSON)
  ]
  for line in open(tmp_path / "metrics.jsonl"):
    json.loads(line, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c}"))
  assert glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*"))
  scalars = _tb_scalars(str(tmp_path / "tb"))
  assert {("train/loss", 1, 0.5), ("train/loss", 2, 0.25), ("perf/tokens_per_s", 1, 1000.0)} <= (
    scalars
  )


def test_appends_across_writers_and_rejects_bad_keys(tmp_path):
  with metrics.MetricsWriter(tmp_path, tensorboard=False) as w:
    w.write(1, {"train/loss": 1.0})
  with metrics.MetricsWriter(tmp_path, tensorboard=False, wandb_project=None) as w:
    w.write(2, {"agent/solve_rate": 0.5})
    for bad in ("loss", "/loss", "train/", "train loss/x"):
      with pytest.raises(ValueError, match="slash-named"):
        w.write(3, {bad: 1.0})
  assert [r["step"] for r in metrics.read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_wandb_is_optional(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "wandb", None)  # "configured but not installed"
  with metrics.MetricsWriter(tmp_path, tensorboard=False, wandb_project="spade") as w:
    w.write(1, {"train/loss": 1.0})
  assert len(metrics.read_metrics(tmp_path / "metrics.jsonl")) == 1


def test_deferred_metrics_are_one_step_late():
  d = metrics.DeferredMetrics()
  assert d.flush() is None
  assert d.push(1, {"train/loss": jnp.float32(1.0)}, {"perf/step_s": 0.5}) is None
  step, host = d.push(2, {"train/loss": jnp.float32(2.0)})
  assert step == 1 and host == {"train/loss": 1.0, "perf/step_s": 0.5}
  assert all(type(v) is float for v in host.values())
  assert d.flush() == (2, {"train/loss": 2.0})
  assert d.flush() is None


def test_progress_bar_eta():
  bar = metrics.ProgressBar(total=10, enabled=False)
  assert bar.eta_s is None
  time.sleep(0.05)
  bar.update(2, {"train/loss": 0.5})
  eta = bar.eta_s
  assert eta is not None and math.isfinite(eta)
  # 8 steps remain at >= 2 steps / 0.05 s: eta is about 4x the elapsed time
  assert 0.15 < eta < 5.0
  bar.close()


def test_throughput_and_matmul_peak():
  out = metrics.throughput(1000, 0.5, model_flops=4e9, peak_flops=1e10)
  assert out == {"perf/tokens_per_s": 2000.0, "perf/mfu": 0.8}
  assert "perf/mfu" not in metrics.throughput(10, 1.0)
  peak = metrics.probe_matmul_peak(sizes=(128,), reps=2)
  assert 1e6 < peak < 1e16  # FLOP/s of a real matmul on this machine
