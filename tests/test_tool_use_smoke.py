"""The tool-use setting with a real model: `tool_use.py:smoke` runs one full SPADE iteration with
SmolLM2-135M (tool-environment designer attempts, sandbox validation, hint writing, hinted and
unhinted tool-calling episodes, update, checkpoint, held-out eval) through the command a user
types."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tool_use_smoke_iteration(tmp_path):
  workdir = tmp_path / "smoke"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  res = subprocess.run(
    [
      sys.executable,
      "experiments/run.py",
      "--config",
      "experiments/configs/tool_use.py:smoke",
      "--workdir",
      str(workdir),
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert res.returncode == 0, res.stderr[-3000:]
  config = json.loads((workdir / "config.json").read_text())
  assert config["setting"] == "tool_use" and config["spade"]["reward"] == "blend"
  rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows] == [0]
  row = rows[0]
  assert row["designer/attempts"] == 2.0
  assert sum(v for k, v in row.items() if k.startswith("designer/stage/")) == 2.0
  assert row["agent/pool_source"] in (0.0, 2.0)  # designer pool, or the tool library pool
  assert row["agent/episodes"] > 0 and row["agent/device_episodes"] == 0.0
  for key in ("calls_per_episode", "tool_error_rate", "format_error_rate", "success"):
    assert f"tool/{key}" in row
  assert "tool/success_hint" in row
  assert row["train/valid_samples"] > 0 and row["train/update_skipped"] == 0.0
  envs = list((workdir / "envs").glob("*.json"))
  assert len([p for p in envs if "attempt" in p.name]) == 2
  if row["agent/pool_source"] == 2.0:
    library = [json.loads(p.read_text()) for p in envs if "library" in p.name]
    assert len(library) == 2 and all(isinstance(v.get("hint"), str) for v in library)
  transcripts = (workdir / "transcripts" / "step000000.jsonl").read_text().splitlines()
  first = json.loads(transcripts[0])["messages"][0]["content"]
  assert first.strip()
  assert (workdir / "checkpoints" / "1").is_dir()
  assert list((workdir / "plots").glob("*.png"))
