"""`python -m spade_jax.plan`: its printed memory is the compiled executables' memory analysis;
its analytic estimate is of the same size; bad input exits 2 with one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spade_jax.plan import cli, programs
from spade_jax.plan.report import format_report

REPO = Path(__file__).resolve().parents[1]
TINY_HF = {
  "model_type": "qwen3",
  "vocab_size": 512,
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 16,
  "tie_word_embeddings": False,
  "max_position_embeddings": 4096,
}
FIELDS = {
  "argument": "argument_size_in_bytes",
  "output": "output_size_in_bytes",
  "temp": "temp_size_in_bytes",
  "alias": "alias_size_in_bytes",
  "generated_code": "generated_code_size_in_bytes",
}


def test_printed_memory_is_the_compiled_memory_analysis(tmp_path, capsys, monkeypatch):
  (tmp_path / "config.json").write_text(json.dumps(TINY_HF))
  compiled = {}
  compile_programs = programs.compile_programs

  def record(progs):
    compiled.update(compile_programs(progs))
    return compiled

  monkeypatch.setattr(programs, "compile_programs", record)
  args = [
    "--config",
    str(REPO / "experiments/configs/qwen3.py:8b"),  # KL on: the reference forward is compiled
    "--mesh",
    "data=2,fsdp=4",
    "--set",
    f"model.path={tmp_path}",
    "--batch",
    "16",
    "--micro_batches",
    "2",
    "--seq",
    "64",
    "--sample_batch",
    "8",
    "--context",
    "128",
    "--prompt",
    "32",
    "--hbm",
    "1",
  ]
  assert cli.main(args + ["--json"]) == 0
  report = json.loads(capsys.readouterr().out)
  assert set(compiled) == {"update", "prefill", "decode"}
  assert report["kl_reference"] and report["mesh"]["data"] == 2 and report["mesh"]["fsdp"] == 4
  text = format_report(report)
  for name, (executable, _) in compiled.items():
    m = executable.memory_analysis()
    printed = report["memory"][name]
    for key, attr in FIELDS.items():
      assert printed[key] == getattr(m, attr), (name, key)
      assert f"{key} {getattr(m, attr)} B" in text
    assert (
      printed["peak"]
      == (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes)
      + m.temp_size_in_bytes
    )
    assert printed["argument"] > 0 and printed["temp"] > 0
  # the update's arguments are the per-device train state and batch: the analytic state bytes
  # (from the shardings) are all of them but the batch and the replicated scalars
  est = report["analytic"]["update"]
  state_bytes = est["params"] + est["adam"] + est["reference"]
  assert state_bytes <= report["memory"]["update"]["argument"] <= state_bytes * 1.2
  assert 0.25 <= est["total"] / report["memory"]["update"]["peak"] <= 4
  assert report["fits"] is True and report["peak"] <= 1 << 30
  assert report["flops"]["update_analytic"] > 0


BAD = [
  (["--config", "experiments/configs/qwen3.py:13b", "--mesh", "fsdp=8"], "13b"),
  (["--config", "experiments/configs/qwen3.py:8b", "--mesh", "fsdp=8", "--devices", "16"], "16"),
  (["--config", "experiments/configs/qwen3.py:8b", "--mesh", "fsdp=x"], "name=size"),
  (["--config", "experiments/configs/qwen3.py:8b", "--mesh", "pipe=8"], "pipe"),
  (["--config", "experiments/configs/qwen3.py:8b", "--mesh", "fsdp=4"], "4 devices"),
  (["--config", "experiments/configs/nope.py", "--mesh", "fsdp=8"], "nope.py"),
  (["--config", "experiments/configs/qwen3.py:8b"], "--mesh"),
]


@pytest.mark.parametrize("args, needle", BAD)
def test_bad_input_returns_2_with_one_line(args, needle, capsys, monkeypatch):
  monkeypatch.chdir(REPO)
  assert cli.main(args) == 2
  out, err = capsys.readouterr()
  lines = err.strip().splitlines()
  assert out == "" and len(lines) == 1 and needle in lines[0], err


def test_cli_exits_2_on_a_mesh_that_is_not_the_target():
  proc = subprocess.run(
    [sys.executable, "-m", "spade_jax.plan", *BAD[1][0]],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr.strip() == "error: --mesh fsdp=8 has 8 devices, --devices says 16"
