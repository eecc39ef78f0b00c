"""The real-model path: `smollm2_cpu.py:smoke` runs one full SPADE iteration with SmolLM2-135M
(designer attempts, sandbox validation, hint writing, hinted / unhinted plays, update,
checkpoint, held-out eval on every offline suite but BFCL) through the same command a user
types."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_smollm2_smoke_iteration(tmp_path):
  workdir = tmp_path / "smoke"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  res = subprocess.run(
    [
      sys.executable,
      "experiments/run.py",
      "--config",
      "experiments/configs/smollm2_cpu.py:smoke",
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
  rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows] == [0]
  row = rows[0]
  assert row["designer/attempts"] == 2.0  # both game slots attempted once
  assert sum(v for k, v in row.items() if k.startswith("designer/stage/")) == 2.0
  assert row["agent/pool_source"] in (0.0, 2.0)  # designer pool, or the library seed pool
  assert row["agent/episodes"] > 0 and "agent/solve_rate_hint" in row
  assert row["train/valid_samples"] > 0 and row["train/update_skipped"] == 0.0
  assert "eval/accuracy" in row
  for suite in ("rg", "rg_hard", "heldout_games", "heldout_tools"):  # one prompt per category
    assert row[f"eval/{suite}/errors"] == 0.0 and 0.0 <= row[f"eval/{suite}/overall"] <= 1.0
  envs = list((workdir / "envs").glob("*.json"))
  assert len([p for p in envs if "attempt" in p.name]) == 2
  hints = [json.loads(p.read_text()).get("hint") for p in envs]
  assert any(isinstance(h, str) for h in hints)  # the policy wrote hints for the pool
  assert (workdir / "checkpoints" / "1").is_dir()
  assert len(list((workdir / "plots").glob("*.png"))) >= 4
  assert list((workdir / "eval").glob("*/rg.jsonl")) and (workdir / "config.json").exists()
