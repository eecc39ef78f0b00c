"""The tool-use setting's SPADE loop end to end on CPU with a scripted designer.

As in test_loop.py, only the designer's *sampling* is replaced by fixed sources (two valid tool
environments, a valid game that is the wrong kind for this setting, a hostile tool environment);
the rest is the real path: sandbox validation of tool environments, hint writing by the policy,
hinted / unhinted tool-calling episodes through the chat template's tool framing, delayed
designer rewards (blend), the GRPO update without std normalisation, checkpoints, resume.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hf_fixtures import save_hf_model, tiny_tokenizer_dir
from test_loop import kill_mid_step_then_rerun

from spade_jax import metrics, train
from spade_jax.spade import designer as designer_lib
from spade_jax.spade import tool_prompts

FIXTURES = Path(__file__).parent / "fixtures"
SCRIPT = [  # game slot -> source the "designer" writes
  FIXTURES / "tool_envs" / "valid" / "tv01_stock_lookup.py",
  FIXTURES / "envs" / "valid" / "v02_arithmetic.py",  # a game: the wrong kind here
  FIXTURES / "tool_envs" / "valid" / "tv03_todo_instructions.py",  # multi-instruction
  FIXTURES / "envs" / "hostile" / "h02_os_system.py",
]


def install_scripted_designer(monkeypatch):
  real = designer_lib.Designer._sample

  def sample(self, conversations, **kw):
    prompts_ids, out = real(self, conversations, **kw)
    if conversations[0][0]["content"] != tool_prompts.TOOL_DESIGNER_SYSTEM:
      return prompts_ids, out  # hint writer: the real policy
    for k in range(len(conversations)):
      text = f"Here is my environment.\n```python\n{SCRIPT[k].read_text()}```\n"
      ids = self.tok.encode(text) + [self.tok.eos_ids[0]]
      out.tokens[k], out.logprobs[k] = ids, [-1.0] * len(ids)
      out.loss_mask[k], out.finished[k] = [1] * len(ids), True
    return prompts_ids, out

  monkeypatch.setattr(designer_lib.Designer, "_sample", sample)
  # a short designer prompt keeps the tiny vocabulary's sequences short (the real prompt
  # builder is tested in test_tool_prompts.py)
  monkeypatch.setattr(
    tool_prompts,
    "tool_designer_messages",
    lambda skill, **kw: [
      {"role": "system", "content": tool_prompts.TOOL_DESIGNER_SYSTEM},
      {"role": "user", "content": f"Design a tool environment for {skill.name}."},
    ],
  )


def tool_config(model_dir, tok_dir):
  c = train.base_config()
  c.setting = "tool_use"
  c.model.path, c.model.tokenizer = model_dir, tok_dir
  c.steps = 2
  c.spade.reward = "blend"
  c.spade.num_games = 4
  c.spade.regen_interval = 1
  c.spade.plays = 2
  c.spade.hint_plays = 3  # more hinted than unhinted plays, as the tool-use recipe
  c.spade.max_attempts = 1
  c.spade.corpus = "none"
  c.designer.max_new_tokens = 16
  c.designer.hint_max_new_tokens = 8
  c.designer.max_context = 4096
  c.agent.max_turns = 2
  c.agent.max_new_tokens = 8
  c.agent.max_context = (
    2048  # tool specs in the system prompt: ~1k tokens in a 512-token vocabulary
  )
  c.agent.device_rollout = False
  c.train.global_batch = 8
  c.train.learning_rate = 1e-4
  c.train.advantage = "center"
  c.train.kl_coef = 0.005
  c.sandbox.workers = 2
  c.sandbox.validation_seeds = 3
  c.eval.tasks = "basic_arithmetic"
  c.eval.items_per_task = 1
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
  workdir = tmp_path_factory.mktemp("tool_reference") / "run"
  with pytest.MonkeyPatch.context() as mp:
    install_scripted_designer(mp)
    last = train.train(tool_config(*policy_dirs), workdir)
  return workdir, last


def _comparable(rows):
  return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_tool_loop_end_to_end(reference_run):
  workdir, last = reference_run
  rows = metrics.read_metrics(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows] == [0, 1]
  for r in rows:
    assert r["designer/valid_rate"] == 0.5
    assert r["designer/stage/ok"] == 2 and r["designer/stage/static"] == 2
    assert r["agent/pool_source"] == 0.0
    assert r["designer/translated_rate"] == 0.0  # tool environments run on the host
    assert r["agent/episodes"] == 4.0 and r["agent/device_episodes"] == 0.0
    for key in ("calls_per_episode", "tool_error_rate", "format_error_rate", "success"):
      assert np.isfinite(r[f"tool/{key}"])
    assert "tool/success_hint" in r and "agent/solve_rate_hint" in r
    assert np.isfinite(r["train/loss"])
  assert rows[1]["designer/trained_samples"] == 4.0  # 2 valid at step 0 + 2 flushed at step 1
  verdicts = {p.stem: json.loads(p.read_text()) for p in (workdir / "envs").glob("*.json")}
  g = {v["game"]: v for k, v in verdicts.items() if k.startswith("step000000")}
  assert g[0]["valid"] and g[2]["valid"] and not g[1]["valid"] and not g[3]["valid"]
  assert g[1]["stage"] == "static" and "game environment" in g[1]["reason"]
  assert g[3]["stage"] == "static" and "os" in g[3]["reason"]
  assert g[0]["translation_reason"] == "tool environments run on the host"
  assert isinstance(g[0]["hint"], str)
  transcripts = [
    json.loads(x) for x in (workdir / "transcripts" / "step000000.jsonl").read_text().splitlines()
  ]
  first = transcripts[0]["messages"]
  assert first[0]["role"] == "user" and first[1]["role"] == "assistant"
  assert {m["role"] for t in transcripts for m in t["messages"]} <= {"user", "assistant", "tool"}
  assert "eval/accuracy" in last


def test_tool_loop_sigkill_mid_step_then_rerun_gives_identical_metrics(
  reference_run, policy_dirs, tmp_path
):
  ref_dir, _ = reference_run
  workdir = tmp_path / "killed"
  driver = str(Path(__file__).parent / "loop_driver.py")
  cmd = [sys.executable, driver, str(workdir), *policy_dirs, "2", "tool_use"]
  got = kill_mid_step_then_rerun(cmd, workdir)
  assert got == _comparable(metrics.read_metrics(ref_dir / "metrics.jsonl"))


def test_eval_cli_plays_every_suite_with_the_runs_checkpoint(reference_run, capsys):
  """`experiments/eval.py` on the run: the checkpoint restores into the config's model and the
  model plays one prompt per category of every offline suite through the real framings (BFCL's
  prompts are ~12-22k tokens in this 512-token vocabulary: one category, its own cache)."""
  from spade_jax.eval import cli

  workdir, _ = reference_run
  argv = ["--workdir", str(workdir), "--limit", "1", "--max_new_tokens", "4", "--max_turns", "2"]
  rows = []
  for suites, context in [
    ("rg_hard,heldout_games,heldout_tools", "4096"),
    ("bfcl_v4:multi_turn_miss_param", "24576"),  # on one device: 8 fake ones are 8x slower
  ]:
    mesh = ["--mesh", "1,1,1"] if suites.startswith("bfcl") else []
    rc = cli.main([*argv, "--suites", suites, "--max_context", context, "--json", *mesh])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows += [json.loads(line) for line in out.splitlines()]
  assert {r["suite"] for r in rows} == {"rg_hard", "heldout_games", "heldout_tools", "bfcl_v4"}
  assert all(r["errors"] == 0 and 0.0 <= r["accuracy"] <= 1.0 for r in rows), rows
  step_dir = workdir / "eval" / "2"  # the checkpoint after two updates
  for suite in ("rg_hard", "heldout_games", "heldout_tools", "bfcl_v4"):
    recs = [json.loads(x) for x in (step_dir / f"{suite}.jsonl").read_text().splitlines()]
    assert recs and all(r["turns"] >= 1 for r in recs), suite
    assert all(r["transcript"][1]["role"] == "assistant" for r in recs), suite
  bfcl = json.loads((step_dir / "bfcl_v4.jsonl").read_text())
  assert bfcl["prompt_id"].startswith("multi_turn_miss_param")
  # a checkpoint that does not exist is one line and exit 2
  assert cli.main([*argv, "--suites", "heldout_games", "--step", "7"]) == 2
  assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: checkpoint")
