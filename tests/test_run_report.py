"""The run report reads a run directory's verdict records and metrics (no model needed)."""

import json

from spade_jax.spade import run_report


def _run(tmp_path):
  envs = tmp_path / "envs"
  envs.mkdir()
  verdicts = {
    "step000000_game00_attempt0": {"valid": False, "stage": "static", "finished": False},
    "step000000_game00_attempt1": {
      "valid": True,
      "stage": "ok",
      "finished": True,
      "skill": "Mathematical Reasoning",
      "gen_step": 0,
      "attempt": 1,
      "class_name": "SumEnv",
      "translated": True,
      "translation_reason": "ok",
      "regret": 0.25,
      "win_rate": 0.5,
      "hint": "add them",
    },
    "step000000_game01_attempt0": {
      "valid": True,
      "stage": "ok",
      "finished": True,
      "translated": False,
      "translation_reason": "refused: lists of strings",
    },
    "step000000_game01_library_digit_sum": {"valid": True, "stage": "ok"},  # not counted
  }
  for stem, v in verdicts.items():
    (envs / f"{stem}.json").write_text(json.dumps(v))
    (envs / f"{stem}.py").write_text(f"class {stem.title()}Env:\n  pass\n")
  (envs / "step000002_game00_attempt0.json").write_text('{"valid": tr')  # being written
  rows = [
    {"step": 0, "designer/attempts": 3.0, "designer/passed": 2.0, "agent/pool_source": 0.0,
     "agent/solve_rate": 0.25, "perf/designer_generate_s": 100.4, "perf/step_s": 300.0},
    {"step": 1, "agent/solve_rate": 0.5, "perf/eval_s": 80.0, "perf/step_s": 120.0},
  ]  # fmt: skip
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"st')
  return tmp_path


def test_counts_stages_translation_and_regret(tmp_path):
  run = _run(tmp_path)
  records = run_report.environment_records(run)
  assert [r["file"] for r in records] == [
    "step000000_game00_attempt0.py",
    "step000000_game00_attempt1.py",
    "step000000_game01_attempt0.py",
  ]
  s = run_report.summary(records)
  assert s["samples"] == 3 and s["finished"] == 2
  assert s["stages"] == {"static": 1, "ok": 2}
  assert (s["passed"], s["translated"], s["trained"], s["nonzero_regret"]) == (2, 1, 1, 1)
  assert s["refusals"] == {"refused: lists of strings": 1}
  assert len(run_report.metric_rows(run)) == 2  # the torn last line is dropped


def test_report_and_cli(tmp_path, capsys):
  run = _run(tmp_path)
  text = run_report.report(run, examples=1)
  assert "3 sampled (2 finished" in text and "non-zero regret: 1" in text
  assert "| 0 | 3 | 2 | new | 0.25 | - | - | 100 |" in text
  assert text.count("### `") == 1 and "class Step000000_Game00_Attempt1Env" in text
  assert "got furthest" not in text
  # fewer passed than asked for: the failed samples that got furthest fill the examples
  text = run_report.report(run, examples=3)
  assert text.count("### `") == 3 and "## Failed samples that got furthest" in text
  assert "`step000000_game00_attempt0.py` (step -, attempt -, - tokens, finished False)" in text

  out = tmp_path / "report.md"
  assert run_report.main([str(run), "--out", str(out)]) == 0
  assert out.read_text() == capsys.readouterr().out
  assert run_report.main([str(tmp_path / "nothing")]) == 2
  assert "not a run directory" in capsys.readouterr().err


def test_furthest_failures_order():
  records = [
    {"file": "a.py", "valid": False, "stage": "static", "finished": True, "gen_step": 4},
    {"file": "b.py", "valid": False, "stage": "contract", "finished": False, "gen_step": 0},
    {"file": "c.py", "valid": False, "stage": "contract", "finished": True, "gen_step": 0},
    {"file": "d.py", "valid": False, "stage": "static", "finished": True, "gen_step": 6},
    {"file": "e.py", "valid": True, "stage": "ok", "finished": True, "gen_step": 6},
  ]
  got = [r["file"] for r in run_report.furthest_failures(records, 4)]
  assert got == ["c.py", "b.py", "d.py", "a.py"]
