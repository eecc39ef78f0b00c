"""experiments/run.py bad input: one-line errors and exit status 2, before any training; the
multi-host launch initialises jax.distributed before anything starts jax's backend."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOKE = "experiments/configs/smollm2_cpu.py:smoke"


def run(*args, timeout=120, **env_vars):
  env = dict(os.environ, JAX_PLATFORMS="cpu", **env_vars)
  env.pop("XLA_FLAGS", None)
  return subprocess.run(
    [sys.executable, "experiments/run.py", *args],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


@pytest.mark.parametrize(
  "args,needle",
  [
    (["--config", SMOKE, "--workdir", "{tmp}", "--config.spade.no_such_key=1"], "no_such_key"),
    (["--config", SMOKE, "--workdir", "{tmp}", "--config.spade.num_games=abc"], "num_games"),
    (
      ["--config", SMOKE, "--workdir", "{tmp}", "--config.model.path=/no/such/model"],
      "/no/such/model",
    ),
    (
      ["--config", SMOKE, "--workdir", "{tmp}", "--config.spade.corpus=/no/such/corpus.jsonl"],
      "corpus",
    ),
    (["--config", SMOKE, "--workdir", "{tmp}", "--config.spade.reward=bogus"], "spade.reward"),
    (["--config", "experiments/configs/smollm2_cpu.py:bogus", "--workdir", "{tmp}"], "bogus"),
    (["--config", "experiments/configs/no_such_config.py", "--workdir", "{tmp}"], "no_such_config"),
    (["--config", SMOKE], "--workdir"),
    (
      [
        "--config",
        "experiments/configs/tiny.py:smoke",
        "--workdir",
        "{tmp}",
        "--config.spade.plateau=(0.5, 0.4, 0.6, 0.85)",
      ],
      "spade.plateau",
    ),
  ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, needle):
  args = [a.replace("{tmp}", str(tmp_path / "w")) for a in args]
  res = run(*args)
  assert res.returncode == 2, res.stderr[-2000:]
  lines = [ln for ln in res.stderr.strip().splitlines() if ln.startswith("error:")]
  assert len(lines) == 1 and needle in lines[0], res.stderr[-2000:]
  assert "Traceback" not in res.stderr


def test_unreadable_corpus(tmp_path):
  bad = tmp_path / "corpus.jsonl"
  bad.write_text('{"text": "fine"}\nnot json\n')
  res = run("--config", SMOKE, "--workdir", str(tmp_path / "w"), f"--config.spade.corpus={bad}")
  assert res.returncode == 2 and f"{bad.name}:2" in res.stderr, res.stderr[-2000:]


def test_distributed_launch_initialises_before_the_config_loads(tmp_path):
  """``SPADE_DISTRIBUTED=1`` (launch/*.sh) under a one-task SLURM job: jax.distributed starts
  before the config's imports (gymnax) start the backend, then the bad override is reported as
  usual; initialised later, jax raises instead."""
  slurm = dict(
    SPADE_DISTRIBUTED="1",
    SLURM_JOB_ID=str(1000 + os.getpid() % 3000),  # coordinator port from the job id
    SLURM_STEP_NODELIST="localhost",
    SLURM_NTASKS="1",
    SLURM_PROCID="0",
    SLURM_LOCALID="0",
    SLURM_STEP_NUM_NODES="1",
  )
  res = run(
    "--config",
    "experiments/configs/tiny.py:smoke",
    "--workdir",
    str(tmp_path / "w"),
    "--config.spade.plateau=(0.5, 0.4, 0.6, 0.85)",
    **slurm,
  )
  assert res.returncode == 2 and "error: " in res.stderr, res.stderr[-2000:]
  assert "spade.plateau" in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
