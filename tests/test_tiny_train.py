"""The tiny on-device SPADE run end to end: the smoke config through `experiments/run.py`'s
`train_tiny`, its artifacts and metrics, and exact resume after SIGKILL. (The default job's
trends are checked on a recorded run by `python -m spade_jax.tiny.analysis.trends --check`, not
here.)"""

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from spade_jax import metrics
from spade_jax.tiny import iteration
from spade_jax.tiny.analysis import family_difficulty, pool_families
from spade_jax.tiny.train import train_tiny

REPO = Path(__file__).resolve().parents[1]
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
RUN = [sys.executable, str(REPO / "experiments" / "run.py")]
SMOKE = "--config=" + str(REPO / "experiments" / "configs" / "tiny.py") + ":smoke"


def smoke_config():
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  return tiny.get_config("smoke")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("tiny") / "run"
  # Other tests (test_tiny_compile_ahead runs the same config) may have traced and compiled
  # the same programs in this process: start from empty in-memory caches so the counts below
  # are this run's own (executables still come from the persistent cache).
  jax.clear_caches()
  before = dict(iteration.TRACES)
  compiles = collections.Counter()  # executables built (or loaded from the persistent cache)

  def on_event(event, duration, fun_name="", **_):
    if event == BACKEND_COMPILE_EVENT:  # fun_name: "jit(iterate)"
      compiles[fun_name.removeprefix("jit(").removesuffix(")")] += 1

  jax.monitoring.register_event_duration_secs_listener(on_event)
  try:
    t0 = time.perf_counter()
    last = train_tiny(smoke_config(), workdir)
    seconds = time.perf_counter() - t0
  finally:
    jax.monitoring.unregister_event_duration_listener(on_event)
  traces = {k: v - before.get(k, 0) for k, v in iteration.TRACES.items()}
  return workdir, last, seconds, traces, compiles


def _comparable(rows):
  return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


GOLDEN = REPO / "tests" / "golden" / "tiny_smoke_metrics.jsonl"
RECORD_GOLDEN = "SPADE_RECORD_GOLDEN"


def golden_rows(workdir) -> list[dict]:
  """The smoke run's every non-timing number: the warm start's summary, then each step's row."""
  warm = json.loads((workdir / "warm_start.json").read_text())
  warm = {"step": "warm_start", **{k: v for k, v in warm.items() if not k.startswith("perf/")}}
  return [warm] + _comparable(metrics.read_metrics(workdir / "metrics.jsonl"))


def test_smoke_metrics_equal_the_golden_file(smoke_run):
  """Any change to the default job's numbers fails here until the golden file is re-recorded on
  purpose (``SPADE_RECORD_GOLDEN=1 python -m pytest tests/test_tiny_train.py -k golden``), and
  docs/tiny and the README's numbers with it. The test session caps XLA's CPU instruction set
  (conftest, `spade_jax.xla_cpu`), so the file holds on any x86-64 machine with AVX2."""
  rows = golden_rows(smoke_run[0])
  if os.environ.get(RECORD_GOLDEN) == "1":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
  golden = [json.loads(x) for x in GOLDEN.read_text().splitlines()]
  assert len(rows) == len(golden)
  for got, want in zip(rows, golden):
    diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert not diff, f"step {want['step']}: (got, golden) {diff}"


def test_smoke_run_artifacts_and_metrics(smoke_run):
  workdir, last, seconds, traces, compiles = smoke_run
  assert seconds < 120, f"tiny smoke took {seconds:.0f} s"
  rows = metrics.read_metrics(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows] == [0, 1, 2]
  for key in (
    "agent/solve_rate",
    "agent/solve_rate_hint",
    "designer/valid_rate",
    "designer/difficulty",
    "designer/difficulty_bits",
    "designer/difficulty_ref",  # the same pool played by the frozen warm-started policy
    "designer/attempt_valid_rate",
    "designer/token_nll",
    "train/loss",
    "eval/accuracy",
  ):
    assert key in rows[0], key
  assert rows[0]["designer/valid_rate"] > 0  # valid programs from the first iteration
  assert rows[0]["designer/token_nll"] > 0
  assert "designer/regret_mean" in rows[2]  # step 0's pool is trained at the next regeneration
  assert rows[2]["designer/trained_samples"] == rows[0]["designer/valid_rate"] * 4
  assert all(np.isfinite(r["train/loss"]) for r in rows)
  # two compiled iteration variants (regeneration / replay), no more
  assert {k: v for k, v in traces.items() if v} == {
    "iterate/regen=True": 1,
    "iterate/regen=False": 1,
  }
  # ... compiled once each, and one executable each for the warm start's oracle episodes and
  # the held-out evaluation: the params the evaluation sees after an iteration are placed like
  # those it saw first (no recompile)
  assert (compiles["iterate"], compiles["rollout"]) == (2, 2), (
    compiles["iterate"],
    compiles["rollout"],
  )
  records = sorted((workdir / "envs").glob("*.json"))
  assert len(records) == 8  # 4 games x 2 regeneration steps
  r0 = json.loads(records[0].read_text())
  assert {"program", "valid", "reason", "win_rate_offset0", "hint_win_rate"} <= set(r0)
  if r0["valid"]:
    assert "regret" in r0 and "turns" in r0["program"]
  assert (workdir / "warm_start.json").exists()
  # held-out results episode by episode, named by the updates the evaluated policy has had:
  # before steps 0 and 2 (eval.every = 2), and after the last update
  evals = sorted((workdir / "eval").glob("*.jsonl"))
  assert [p.name for p in evals] == ["step000000.jsonl", "step000002.jsonl", "step000003.jsonl"]
  episodes = [[json.loads(x) for x in p.read_text().splitlines()] for p in evals]
  assert {"family", "group", "seed", "solved"} <= set(episodes[0][0])
  assert [[e["seed"] for e in ep] for ep in episodes[1:]] == [[e["seed"] for e in episodes[0]]] * 2
  # the last row's metrics are the final evaluation's (they replace the one before step 2)
  for ep, row in ((episodes[0], rows[0]), (episodes[2], rows[2])):
    assert len(ep) == row["eval/episodes"] > 0
    assert np.mean([e["solved"] for e in ep]) == pytest.approx(row["eval/accuracy"])
  assert sorted(p.name for p in (workdir / "plots").glob("*.png"))
  assert (workdir / "checkpoints" / "3").exists() and (workdir / "config.json").exists()


def test_run_py_smoke_resumes_and_sigkill_gives_identical_metrics(smoke_run, tmp_path):
  ref_dir = smoke_run[0]
  workdir = tmp_path / "killed"
  cmd = RUN + [SMOKE, f"--workdir={workdir}"]
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
  proc = subprocess.Popen(
    cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
  )
  try:  # kill as soon as step 0 is checkpointed, i.e. somewhere inside step 1
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
      if (workdir / "checkpoints" / "1").exists():
        time.sleep(1.0)
        break
      time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be killed mid-step"
    os.killpg(proc.pid, signal.SIGKILL)
  finally:
    proc.wait(timeout=60)
  res = subprocess.run(cmd, timeout=600, env=env, capture_output=True, text=True)
  assert res.returncode == 0, res.stderr[-3000:]
  got = _comparable(metrics.read_metrics(workdir / "metrics.jsonl"))
  want = _comparable(metrics.read_metrics(ref_dir / "metrics.jsonl"))
  assert got == want
  for p in sorted((ref_dir / "eval").glob("*.jsonl")):
    assert (workdir / "eval" / p.name).read_text() == p.read_text()


def test_designer_prompt_takes_a_memory_seed_of_its_skill():
  """With memory on, a game's designer prompt carries one positive program of its skill (the
  SPADE seed rule: win rate inside the learnable band), encoded in the designer language."""
  from spade_jax.spade.memory import EnvMemory
  from spade_jax.tiny.setup import TinySetup

  setup = TinySetup(smoke_config())
  skill = setup.skills_of(0)[0]
  from spade_jax.envs.library import FAMILIES

  name = next(n for n in setup.train_families if FAMILIES[n].skill == skill)
  tokens = setup.library.tokens[(name, 0)]
  memory = EnvMemory()
  memory.add(source=setup.lang.decode(tokens), skill=skill, win_rate=0.5, regret=0.25, step=0)
  plain = setup.inputs(0, None)
  seeded = setup.inputs(0, memory)
  n_plain = int(plain.prompt_valid_GP[0].sum())
  n_seeded = int(seeded.prompt_valid_GP[0].sum())
  assert n_seeded == n_plain + len(tokens)
  row = seeded.prompts_GP[0][seeded.prompt_valid_GP[0]].tolist()
  assert any(row[i : i + len(tokens)] == list(tokens) for i in range(len(row)))
  # a record outside the learnable band (never won) is not a seed
  memory = EnvMemory()
  memory.add(source=setup.lang.decode(tokens), skill=skill, win_rate=0.0, regret=0.0, step=0)
  np.testing.assert_array_equal(setup.inputs(0, memory).prompts_GP, plain.prompts_GP)


def test_reward_band_and_cap_reach_the_designer_reward():
  from spade_jax.tiny.setup import TinySetup

  c = smoke_config()
  c.spade.plateau = (0.05, 0.2, 0.4, 0.7)
  c.spade.reward_scale_cap = 0.5
  reward = TinySetup(c).spec.reward
  assert reward.plateau == (0.05, 0.2, 0.4, 0.7) and reward.scale_cap == 0.5


def test_family_difficulty_analysis_reads_a_run(smoke_run, capsys):
  """`spade_jax.tiny.analysis.family_difficulty` rebuilds a run's config and checkpoint and
  prints failure rates of its frozen warm and final policies by family and knob-scale bin.
  (In process, like `python -m ...` with these arguments: it shares the session's compiled
  programs; tests/test_tiny_analysis.py checks each tool's command line.)"""
  family_difficulty.main([str(smoke_run[0]), "--variants", "1", "--episodes", "1"])
  out = capsys.readouterr().out
  for policy in ("warm", "final"):
    rates = re.findall(rf"{policy} policy: spread .* family means ([0-9.]+), of bin means", out)
    assert len(rates) == 1 and 0.0 <= float(rates[0]) <= 1.0, out
  lib = re.findall(r"^  lib +([0-9.]+) \((\d+)\)$", out, re.M)
  assert len(lib) == 2 and all(0.0 <= float(r) <= 1.0 and int(n) > 0 for r, n in lib)


def test_pool_families_analysis_reads_a_run(smoke_run, capsys):
  """`spade_jax.tiny.analysis.pool_families` replays a run's recorded designer games with its
  frozen warm policy and prints the family mix and failure rates of the first and last quarter
  (in process, as above)."""
  pool_families.main([str(smoke_run[0]), "--episodes", "1"])
  out = capsys.readouterr().out
  quarters = re.findall(r"^(first|last) +quarter: (\d+) games .* failure ([0-9.]+);", out, re.M)
  assert [q[0] for q in quarters] == ["first", "last"], out
  assert all(int(n) > 0 and 0.0 <= float(f) <= 1.0 for _, n, f in quarters)
  assert re.search(r"^within-family change ([+-][0-9.]+|n/a)$", out, re.M), out
