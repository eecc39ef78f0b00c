"""benchmarks/gpu_check.py (issue 26's accelerator check), dry-run on the CPU at tiny shapes."""

import importlib.util
import json
import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_script():
  spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_dry_run_times_decode_and_update_and_writes_its_json(tmp_path):
  out_file = tmp_path / "check.json"
  argv = ["--small", "--batches", "2", "--modes", "greedy,spade", "--prompt", "8", "--new", "8"]
  argv += ["--update-batch", "2", "--reps", "1", "--steps", "1", "--peak-n", "128"]
  out = load_script().main(argv + ["--out", str(out_file)])
  assert json.loads(out_file.read_text()) == out
  assert out["backend"] == "cpu" and out["preset"] == "issue 26 CPU model"
  assert [(r["batch"], r["mode"]) for r in out["decode"]] == [(2, "greedy"), (2, "spade")]
  for row in out["decode"]:
    assert row["new_tokens"] == 8 and row["retraces_after_warmup"] == 0
    assert row["decode_tok_s"] > 0 and row["weight_read_gb_s"] >= 0
    assert "tokens" not in row
  update = out["update"]
  assert (update["batch"], update["seq"], update["loss_start"]) == (2, 16, 8)
  assert math.isfinite(update["first"]["train/loss"])
  assert update["tflops_per_s"] > 0 and 0 < update["peak_share"]


def test_small_keeps_the_shapes_given_on_the_command_line(monkeypatch):
  module = load_script()
  seen = {}
  monkeypatch.setattr(module, "decode_rows", lambda m, c, args: seen.update(vars(args)) or [])
  module.main(["--small", "--new=4", "--no-update", "--peak-n", "64"])
  assert seen["new"] == 4 and seen["prompt"] == module.SHAPES["prompt"][1]
  assert seen["batches"] == module.SHAPES["batches"][1]
