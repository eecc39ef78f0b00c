"""The `check` CLI: output schema, exit codes, usage errors, the translator seam, and that the
file never executes in the CLI's own process."""

import collections
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from spade_jax.envs.sandbox import check

FIXTURES = Path(__file__).parent / "fixtures" / "envs"
VALID = FIXTURES / "valid" / "v02_arithmetic.py"
INVALID = FIXTURES / "invalid" / "i17_infeasible_solution.py"
KEYS = {
  "valid",
  "stage",
  "reason",
  "translated",
  "translation_reason",
  "checked_episodes",
  "timings",
}


def run_cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "spade_jax.envs.check", *args],
    capture_output=True,
    text=True,
    timeout=120,
  )


def test_valid_file_json_and_exit_0():
  proc = run_cli(str(VALID), "--json", "--seeds", "8")
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.strip().splitlines()
  assert len(lines) == 1  # exactly one JSON object
  out = json.loads(lines[0])
  assert KEYS <= set(out)
  assert (out["valid"], out["stage"], out["reason"]) == (True, "ok", "")
  assert out["class_name"] == "ArithmeticEnv" and out["validation_seeds"] == list(range(8))
  assert {"extract", "static", "load", "contract", "feasibility", "determinism", "leak"} <= set(
    out["timings"]
  )
  assert isinstance(out["translated"], bool) and isinstance(out["translation_reason"], str)
  assert isinstance(out["checked_episodes"], int)


def test_invalid_file_exit_1_with_stage_and_reason():
  proc = run_cli(str(INVALID), "--json")
  assert proc.returncode == 1, proc.stderr
  out = json.loads(proc.stdout)
  assert (out["valid"], out["stage"]) == (False, "feasibility")
  assert "gave reward 0 and terminated=False" in out["reason"]
  assert out["translated"] is False and out["translation_reason"].startswith("not attempted")
  assert out["checked_episodes"] == 0


def test_human_readable_summary():
  proc = run_cli(str(INVALID))
  assert proc.returncode == 1
  assert "INVALID at stage 'feasibility'" in proc.stdout and "timings:" in proc.stdout


@pytest.mark.parametrize(
  "args, message",
  [
    (["/nonexistent/env.py", "--json"], "no such file"),
    ([str(VALID), "--seeds", "0"], "must be positive"),
    ([str(VALID), "--seeds", "many"], "invalid"),
    ([str(VALID), "--tokenizer", "/nonexistent/tok"], "no such tokenizer path"),
    ([str(VALID), "--frobnicate"], "unrecognized arguments"),
    ([], "the following arguments are required"),
  ],
)
def test_usage_errors_exit_2(args, message, capsys):
  assert check.main(args) == 2
  captured = capsys.readouterr()
  assert captured.out == "" and message in captured.err


def test_directory_is_a_usage_error(tmp_path, capsys):
  assert check.main([str(tmp_path), "--json"]) == 2
  assert "no such file" in capsys.readouterr().err


def test_file_never_executes_in_the_cli_process(tmp_path, capsys):
  # Passes the AST check; if it ran here it would leave a marker on collections.Counter.
  src = (FIXTURES / "valid" / "v01_guess_number.py").read_text()
  src = src.replace(
    "import re\n", "import re\nimport collections\n\nC = collections.Counter\nC.marker = 1\n"
  )
  path = tmp_path / "marker_env.py"
  path.write_text(src)
  assert check.main([str(path), "--json"]) == 1
  out = json.loads(capsys.readouterr().out)
  assert out["stage"] == "load" and "modified shared module state" in out["reason"]
  assert not hasattr(collections.Counter, "marker")


def test_translator_seam_when_absent(monkeypatch, capsys):
  monkeypatch.setitem(sys.modules, check.TRANSLATOR_MODULE, None)  # import -> ModuleNotFoundError
  assert check.main([str(VALID), "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["translated"] is False
  assert out["translation_reason"] == "translator not available" and out["checked_episodes"] == 0


def test_translator_failure_keeps_the_schema(monkeypatch, capsys):
  fake = types.ModuleType(check.TRANSLATOR_MODULE)

  def translate_and_check(source, report, tokenizer=None, seeds=64):
    raise RuntimeError("lowering bug")

  fake.translate_and_check = translate_and_check
  monkeypatch.setitem(sys.modules, check.TRANSLATOR_MODULE, fake)
  assert check.main([str(VALID), "--json"]) == 0  # validity does not depend on translation
  out = json.loads(capsys.readouterr().out)
  assert out["translated"] is False
  assert out["translation_reason"] == "translator failed: RuntimeError: lowering bug"


def test_translator_seam_when_present(monkeypatch, capsys, tmp_path):
  calls = []

  def translate_and_check(source, report, tokenizer=None, seeds=64):
    calls.append((source, report.class_name, tokenizer, seeds))
    return {
      "translated": True,
      "translation_reason": "",
      "checked_episodes": seeds * 6,
      "timings": {"translate": 0.25},
    }

  fake = types.ModuleType(check.TRANSLATOR_MODULE)
  fake.translate_and_check = translate_and_check
  monkeypatch.setitem(sys.modules, check.TRANSLATOR_MODULE, fake)
  tok = tmp_path / "tok"
  tok.mkdir()
  assert check.main([str(VALID), "--json", "--seeds", "5", "--tokenizer", str(tok)]) == 0
  out = json.loads(capsys.readouterr().out)
  assert (out["translated"], out["checked_episodes"]) == (True, 30)
  assert out["timings"]["translate"] == 0.25 and "leak" in out["timings"]
  (source, class_name, tokenizer, seeds) = calls[0]
  assert class_name == "ArithmeticEnv" and tokenizer == str(tok) and seeds == 5
  assert source == VALID.read_text().strip("\n")
  # An invalid env never reaches the translator.
  assert check.main([str(INVALID), "--json"]) == 1 and len(calls) == 1
  capsys.readouterr()


def test_validation_options_reach_the_validator():
  proc = run_cli(str(VALID), "--json", "--validation-seeds", "2", "--call-timeout", "5")
  out = json.loads(proc.stdout)
  assert out["validation_seeds"] == [0, 1] and os.path.basename(out["file"]) == VALID.name
  assert out["sandbox_layers"]["audit_hook"] == "on"
