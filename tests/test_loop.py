"""The SPADE loop end to end on CPU with a scripted designer (the one place a stub is right).

A tiny random policy cannot write environments, so the designer role's *sampling* is replaced
by fixed sources (valid translatable, valid host-only, a re-spaced copy of a library seed,
hostile); everything else is
the real path: sandbox validation, hint writing by the policy, hinted / unhinted plays,
delayed designer rewards, the mixed GRPO update, checkpoints, resume, metrics, plots.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hf_fixtures import save_hf_model, tiny_tokenizer_dir

from spade_jax import metrics, train
from spade_jax.spade import designer as designer_lib
from spade_jax.spade import observe, prompts
from spade_jax.spade.library_seeds import library_entries

FIXTURES = Path(__file__).parent / "fixtures" / "envs"


def library_copy() -> str:
  """A library seed's source with its whitespace changed (blank lines, trailing spaces): valid
  Python that the validator would pass, rejected at the designer's "copy" stage."""
  source = library_entries("game")[0].source
  return source.replace(":\n", ":  \n\n")


SCRIPT = [  # game slot -> source the "designer" writes (wrapped in a fence, as a model would)
  FIXTURES / "valid" / "v02_arithmetic.py",  # inside the translatable subset
  FIXTURES / "valid" / "v10_word_reverse.py",  # host-only (strings)
  library_copy,  # a verbatim copy of a library seed (the memory holds library seeds)
  FIXTURES / "hostile" / "h02_os_system.py",
]


def install_scripted_designer(monkeypatch):
  real = designer_lib.Designer._sample

  def sample(self, conversations, **kw):
    prompts_ids, out = real(self, conversations, **kw)
    if conversations[0][0]["content"] != prompts.DESIGNER_SYSTEM:
      return prompts_ids, out  # hint writer: the real policy
    for k in range(len(conversations)):  # one attempt per slot: conversation k is game k
      src = SCRIPT[k].read_text() if isinstance(SCRIPT[k], Path) else SCRIPT[k]()
      text = f"Here is my game.\n```python\n{src}```\n"
      ids = self.tok.encode(text) + [self.tok.eos_ids[0]]
      out.tokens[k], out.logprobs[k] = ids, [-1.0] * len(ids)
      out.loss_mask[k], out.finished[k] = [1] * len(ids), True
    return prompts_ids, out

  monkeypatch.setattr(designer_lib.Designer, "_sample", sample)
  # a short designer prompt keeps the tiny 512-token vocabulary's sequences short; the real
  # prompt builder is tested in test_prompts.py
  monkeypatch.setattr(
    prompts,
    "designer_messages",
    lambda skill, **kw: [
      {"role": "system", "content": prompts.DESIGNER_SYSTEM},
      {"role": "user", "content": f"Design a game for {skill.name}."},
    ],
  )


@pytest.fixture()
def scripted_designer(monkeypatch):
  install_scripted_designer(monkeypatch)


def tiny_config(model_dir, tok_dir):
  c = train.base_config()
  c.model.path, c.model.tokenizer = model_dir, tok_dir
  c.mesh.shape = (1, -1, 1)
  c.steps = 2
  c.spade.num_games = 4
  c.spade.regen_interval = 1
  c.spade.plays = 2
  c.spade.hint_plays = 2
  c.spade.max_attempts = 1
  c.spade.corpus = "none"
  c.spade.library_seeds = True
  c.spade.translate_seeds = 8
  c.designer.max_new_tokens = 16
  c.designer.hint_max_new_tokens = 8
  c.designer.max_context = 2048
  c.agent.max_turns = 2
  c.agent.max_new_tokens = 8
  c.agent.max_context = 256
  c.agent.device_context = 768  # the agent system prompt is 174 tokens in the test vocabulary
  c.agent.device_prompt_len = 512
  c.train.global_batch = 8
  c.train.learning_rate = 1e-4
  c.sandbox.workers = 2
  c.sandbox.validation_seeds = 3
  c.eval.tasks = "basic_arithmetic"
  c.eval.items_per_task = 2
  c.eval.max_new_tokens = 8
  c.progress = False
  return c


@pytest.fixture(scope="module")
def policy_dirs():
  tok_dir = tiny_tokenizer_dir()
  model_dir, _ = save_hf_model("qwen3", seed=3, vocab_size=512, num_hidden_layers=1)
  return model_dir, tok_dir


@pytest.fixture(scope="module")
def reference_run(policy_dirs, tmp_path_factory):
  """An uninterrupted 2-step run (module-scoped: several tests read it)."""
  workdir = tmp_path_factory.mktemp("reference") / "run"
  with pytest.MonkeyPatch.context() as mp:
    install_scripted_designer(mp)
    last = train.train(tiny_config(*policy_dirs), workdir)
  return workdir, last


def _comparable(rows):
  return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_loop_end_to_end(reference_run):
  workdir, last = reference_run
  rows = metrics.read_metrics(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows] == [0, 1]
  for r in rows:  # two of the four scripted environments validate, every step
    assert r["designer/valid_rate"] == 0.5
    stages = {k.removeprefix("designer/stage/"): v for k, v in r.items() if "/stage/" in k}
    assert set(stages) == {*observe.DESIGNER_STAGES, "ok"}  # every stage, zeros included
    assert stages["ok"] == r["designer/passed"] == 2 and stages["static"] == 1
    assert stages["copy"] == 1 and sum(stages.values()) == r["designer/attempts"] == 4
    assert r["agent/pool_source"] == 0.0
    assert r["designer/translated_rate"] == 0.5  # v02 translates, v10 (strings) does not
    refusals = {k: v for k, v in r.items() if k.startswith("designer/refusal/")}
    assert sum(refusals.values()) == 1.0  # v10's reason, as a short key
    assert r["agent/episodes"] == 4.0  # 2 valid games x 2 plays
    assert r["agent/device_episodes"] == 4.0  # v02 (translated): 2 plays + 2 hinted, on device
    assert r["agent/host_episodes"] == 4.0 and r["agent/device_share"] == 0.5  # v10 on host
    assert r["agent/solve_rate/new"] == r["agent/solve_rate"]  # every slot is new this step
    assert r["designer/prompt_seeds_mean"] == 2.0 == r["designer/prompt_library_seeds_mean"]
    for phase in ("designer_generate", "validate", "hint", "translate", "update"):
      assert r[f"perf/{phase}_s"] >= 0.0
    assert r["perf/rollout_device_s"] > 0.0 and r["perf/rollout_host_s"] > 0.0
    assert "agent/solve_rate_hint" in r and np.isfinite(r["train/loss"])
  assert rows[1]["designer/regret_games/new"] == 4.0  # both epochs' 2 valid games (final flush)
  assert 0.0 <= rows[1]["designer/regret/new"] <= 2.0 and "perf/eval_s" in rows[1]
  # delayed designer training: samples of step 0 are trained at step 1 (and the final flush)
  assert "designer/trained_samples" not in rows[0]
  assert rows[1]["designer/trained_samples"] == 4.0  # 2 valid at step 0 + 2 flushed (step 1)
  assert rows[1]["train/designer_samples"] == 4.0
  assert "eval/accuracy" in last
  verdicts = {p.stem: json.loads(p.read_text()) for p in (workdir / "envs").glob("*.json")}
  g = {v["game"]: v for k, v in verdicts.items() if k.startswith("step000000")}
  assert g[0]["valid"] and g[1]["valid"] and not g[2]["valid"] and not g[3]["valid"]
  assert g[2]["stage"] == "copy" and "library seed" in g[2]["reason"]
  assert g[3]["stage"] == "static" and "os" in g[3]["reason"]
  assert isinstance(g[0]["hint"], str) and "win_rate" in g[0] and "regret" in g[0]
  assert g[0]["translated"] and not g[1]["translated"] and "line" in g[1]["translation_reason"]
  assert sorted(p.name for p in (workdir / "plots").glob("*.png"))
  assert (workdir / "checkpoints").exists() and (workdir / "config.json").exists()
  assert list((workdir / "eval").glob("*/rg.jsonl")) and list((workdir / "transcripts").glob("*"))


def test_rerun_resumes_and_extends(reference_run, policy_dirs, tmp_path):
  src, _ = reference_run
  workdir = tmp_path / "run"
  shutil.copytree(src, workdir)
  rows = metrics.read_metrics(workdir / "metrics.jsonl")
  with pytest.MonkeyPatch.context() as mp:
    install_scripted_designer(mp)
    config = tiny_config(*policy_dirs)
    train.train(config, workdir)  # the same command again: nothing left to do
    assert metrics.read_metrics(workdir / "metrics.jsonl") == rows
    config.steps = 3  # a longer run continues from the checkpoint instead of starting over
    train.train(config, workdir)
  rows3 = metrics.read_metrics(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows3] == [0, 1, 2] and rows3[:2] == rows


def kill_mid_step_then_rerun(cmd: list, workdir: Path) -> list:
  """Runs ``cmd`` (a loop driver writing ``workdir``), SIGKILLs it as soon as step 0 is
  checkpointed (somewhere inside step 1), checks only step 0 was logged, reruns it to the end
  and returns the metrics rows without perf/ keys."""
  proc = subprocess.Popen(
    cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
  )
  try:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
      if (workdir / "checkpoints" / "1").exists():
        time.sleep(2.0)
        break
      time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed mid-step"
    os.killpg(proc.pid, signal.SIGKILL)
  finally:
    proc.wait(timeout=60)
  rows = metrics.read_metrics(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows] == [0]
  subprocess.run(cmd, check=True, timeout=900, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  return _comparable(metrics.read_metrics(workdir / "metrics.jsonl"))


def test_sigkill_mid_step_then_rerun_gives_identical_metrics(reference_run, policy_dirs, tmp_path):
  ref_dir, _ = reference_run
  workdir = tmp_path / "killed"
  driver = str(Path(__file__).parent / "loop_driver.py")
  got = kill_mid_step_then_rerun([sys.executable, driver, str(workdir), *policy_dirs, "2"], workdir)
  assert got == _comparable(metrics.read_metrics(ref_dir / "metrics.jsonl"))


def test_changed_config_is_refused(tmp_path, policy_dirs, scripted_designer):
  config = tiny_config(*policy_dirs)
  config.steps = 1
  train.train(config, tmp_path / "run")
  config.spade.num_games = 3
  with pytest.raises(train.UserError, match="different config"):
    train.train(config, tmp_path / "run")
