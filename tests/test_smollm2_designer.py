"""Issue 29's first acceptance item: SmolLM2-135M-Instruct (initial weights, prompts seeded with
library environments, a fixed seed, a small budget) writes an environment that passes every
validation stage, is not a library seed, and is translated to the on-device program.

The designer runs alone through `experiments/designer_probe.py` (the same policy, memory, prompts
and validator as a training run) with `smollm2_cpu.py:reply=helpers`: every reply starts with the
generic prefix `prompts.GAME_REPLY_HELPERS` (imports, the library's answer parser, "class"), which
the model continues, at temperature 0.3 (at the config's 0.6 no sample of 8 passed). The passing
source is validated again here, in a fresh sandbox, and compared with every library seed from
its class on (`memory.copy_key`, as the designer's "copy" stage does).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spade_jax.envs.sandbox.validate import ValidatorConfig, validate
from spade_jax.spade.library_seeds import library_entries
from spade_jax.spade.memory import copy_key
from spade_jax.spade.prompts import GAME_REPLY_HELPERS

ROOT = Path(__file__).resolve().parents[1]
SLOTS = 8  # one round, one attempt per slot: 8 samples in one batch


@pytest.mark.slow
def test_smollm2_writes_a_valid_environment(tmp_path):
  workdir = tmp_path / "probe"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  for key in ("XLA_FLAGS", "JAX_DEFAULT_MATMUL_PRECISION"):  # as the probe's command line runs
    env.pop(key, None)
  res = subprocess.run(
    [
      sys.executable,
      "experiments/designer_probe.py",
      "--config",
      "experiments/configs/smollm2_cpu.py:reply=helpers",
      "--workdir",
      str(workdir),
      "--rounds=1",
      f"--config.spade.num_games={SLOTS}",
      "--config.spade.max_attempts=1",
      "--config.spade.corpus=none",
      "--config.spade.active_skills=1",  # every slot Mathematical Reasoning (6 library seeds)
      "--config.designer.max_context=2304",  # one seed beside the 384-token reply
      "--config.designer.temperature=0.3",  # the trainer needs the agent's to be the same
      "--config.agent.temperature=0.3",
      "--config.seed=0",
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=1200,
  )
  assert res.returncode == 0, res.stderr[-3000:]
  total = json.loads((workdir / "probe.json").read_text())["total"]
  assert total["designer/attempts"] == SLOTS
  rounds = json.loads((workdir / "probe.json").read_text())["rounds"]
  assert rounds[0]["designer/prompt_library_seeds_mean"] >= 1.0  # seeded prompts
  verdicts = sorted((workdir / "envs").glob("*_attempt0.json"))
  assert len(verdicts) == SLOTS
  passed = [p for p in verdicts if json.loads(p.read_text())["valid"]]
  stages = {p.stem: json.loads(p.read_text())["stage"] for p in verdicts}
  assert passed, f"no sample passed validation: {stages}"
  assert total["designer/passed"] == len(passed)
  # the chain goes on: a passing sample is put on device (the prefix's parser is the device's)
  translated = [p for p in passed if json.loads(p.read_text())["translated"]]
  assert translated, [json.loads(p.read_text())["translation_reason"] for p in passed]
  seeds = {e.name: copy_key(e.source) for e in library_entries("game")}
  for p in passed:
    source = p.with_suffix(".py").read_text()
    verdict = json.loads(p.read_text())
    assert verdict["stage"] == "ok" and verdict["class_name"].endswith("Env")
    # what the model wrote follows the fixed prefix (less its fence)
    prefix = GAME_REPLY_HELPERS.removeprefix("```python\n")
    assert source.startswith(prefix) and len(source) > len(prefix) + 100
    for name, seed in seeds.items():
      assert copy_key(source) != seed, f"{p.name} repeats the library seed {name}"
    again = validate(source, ValidatorConfig())
    assert again.valid and again.stage == "ok", again.reason
