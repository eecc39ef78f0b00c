"""The SPADE loop's supervised designer warm start (`spade.warmstart`): library examples and their
difficulty variants as designer replies, validated; prompts that never show the example's own
environment; the supervised update lowers the NLL of the replies; the run wires it in once."""

import ast
import copy
import dataclasses
import json

import jax
import numpy as np
import pytest
from hf_fixtures import save_hf_model, tiny_tokenizer_dir

from spade_jax import train
from spade_jax.envs.sandbox.validate import ValidatorConfig, extract_code, validate
from spade_jax.rollout.chat import ChatFraming
from spade_jax.spade import config as spade_config
from spade_jax.spade import prompts, warmstart
from spade_jax.spade.designer import Designer, DesignerConfig
from spade_jax.spade.library_seeds import library_entries
from spade_jax.spade.memory import EnvMemory
from spade_jax.spade.prompts import GAME_REPLY_CLASS, GAME_REPLY_HELPERS
from spade_jax.tokenizer import load_tokenizer

ARGMAX = next(e for e in library_entries("game") if e.name == "argmax")


def _init_defaults(source, class_name):
  tree = ast.parse(source)
  cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
  fn = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
  args = fn.args.args[len(fn.args.args) - len(fn.args.defaults) :]
  return {a.arg: d.value for a, d in zip(args, fn.args.defaults)}


def test_int_defaults_are_the_literals_of_init():
  found = warmstart.int_defaults(ARGMAX.source, ARGMAX.class_name)
  assert {name: v for name, v, _, _ in found} == {"max_turns": 3, "n": 6, "max_value": 50}
  for _, v, start, end in found:
    assert ARGMAX.source[start:end] == str(v)  # bools (smallest=False) are not rescaled
  assert warmstart.int_defaults(ARGMAX.source, "NoSuchEnv") == []


def test_int_defaults_offsets_positional_only_and_odd_characters():
  source = (
    '"""\x0c caf\u00e9 \u2028"""\n'
    "class Env:\n"
    "  def __init__(self, a=1, /, b=2, *, c=3, flag=True, d=-4, name='\u00e9'):\n"
    "    pass\n"
  )
  found = warmstart.int_defaults(source, "Env")
  assert [(name, v) for name, v, _, _ in found] == [("a", 1), ("b", 2), ("c", 3)]
  for _, v, start, end in found:
    assert source[start:end] == str(v)


def test_variants_rescale_defaults_and_nothing_else():
  found = warmstart.difficulty_variants(ARGMAX.source, ARGMAX.class_name, 4, seed=(0, 1))
  assert len(found) == 4 and len({s for s, _ in found}) == 4
  base = _init_defaults(ARGMAX.source, ARGMAX.class_name)
  for source, changes in found:
    assert changes and source != ARGMAX.source
    now = _init_defaults(source, ARGMAX.class_name)
    for name, v in base.items():
      old_new = changes.get(name, (v, v))
      assert old_new[0] == v and now[name] == old_new[1]
      if name in changes:
        assert now[name] >= 1 and now[name] != v
    # only the defaults' literals changed: the sources agree once they are put back
    restored = source
    spans = sorted(warmstart.int_defaults(source, ARGMAX.class_name), key=lambda f: -f[2])
    for name, _, start, end in spans:
      restored = restored[:start] + str(base[name]) + restored[end:]
    assert restored == ARGMAX.source
  again = warmstart.difficulty_variants(ARGMAX.source, ARGMAX.class_name, 4, seed=(0, 1))
  assert again == found  # deterministic in its seed


def test_reply_text_forms():
  plain = warmstart.reply_text(ARGMAX.source, ARGMAX.class_name, "")
  assert plain.startswith("```python\n") and plain.endswith("\n```")
  assert extract_code(plain).strip() == ARGMAX.source.strip()
  helpers = warmstart.reply_text(ARGMAX.source, ARGMAX.class_name, GAME_REPLY_HELPERS)
  assert helpers.startswith(GAME_REPLY_HELPERS)
  code = extract_code(helpers)
  # the module's preamble (docstring, imports, helpers) is replaced by the prefix
  start = ARGMAX.source.index(f"class {ARGMAX.class_name}:")
  assert (
    code.strip()
    == (GAME_REPLY_HELPERS.removeprefix("```python\n") + ARGMAX.source[start + 5 :]).strip()
  )
  assert warmstart.reply_text(ARGMAX.source, "NoSuchEnv", GAME_REPLY_HELPERS) is None
  assert warmstart.reply_text(ARGMAX.source, "Argmax", GAME_REPLY_HELPERS) is None  # whole names
  with pytest.raises(ValueError, match="must end with 'class'"):
    warmstart.reply_text(ARGMAX.source, ARGMAX.class_name, "```python\n")


def test_library_examples_are_valid_replies():
  entries = library_entries("game")
  examples, dropped = warmstart.library_examples(
    "game", GAME_REPLY_HELPERS, 1, ValidatorConfig(), 0
  )
  assert dropped == {"no_class": 0, "copy": 0, "invalid": 0}
  assert {e.name for e in examples if not e.changes} == {e.name for e in entries}
  variants = [e for e in examples if e.changes]
  assert variants and all(e.name.endswith("+1") for e in variants)
  for e in examples[:6]:
    report = validate(e.reply, ValidatorConfig())
    assert report.valid and report.kind == "game", report.reason
  # a prefix that leaves the twins' helper (_boxed_ints) undefined: every reply fails validation
  examples, dropped = warmstart.library_examples("game", GAME_REPLY_CLASS, 0, ValidatorConfig(), 0)
  assert examples == [] and dropped["invalid"] == len(entries)


def test_copies_of_library_seeds_are_left_out_when_the_loop_rejects_them():
  """With library seeds in the run's memory the loop rejects a verbatim copy of one (stage
  "copy", the same code from the class on): an original's reply is one in either form (plain, or
  after a reply prefix that replaces the module's preamble), so only its variants train."""
  n = len(library_entries("game"))
  for prefix in ("", GAME_REPLY_HELPERS):
    found, dropped = warmstart.library_examples("game", prefix, 1, ValidatorConfig(), 0, True)
    assert dropped["copy"] == n and found and all(e.changes for e in found)
    memory = EnvMemory()
    for e in library_entries("game"):
      memory.add_seed(e.source, skill=e.skill, name=e.name)
    assert all(memory.is_seed_copy(extract_code(e.reply)) is None for e in found)


def test_tool_library_examples_are_valid_tool_replies():
  examples, dropped = warmstart.library_examples("tool", "", 1, ValidatorConfig(), 0)
  assert dropped == {"no_class": 0, "copy": 0, "invalid": 0}
  assert sorted(e.name for e in examples) == sorted(e.name for e in library_entries("tool"))
  assert all(not e.changes for e in examples)  # no integer constructor defaults to rescale
  report = validate(examples[0].reply, ValidatorConfig())
  assert report.valid and report.kind == "tool", report.reason


@pytest.fixture(scope="module")
def tok():
  return load_tokenizer(tiny_tokenizer_dir())


def _designer(tok, tmp_path, prefix=GAME_REPLY_HELPERS, max_new=2048, context=8192):
  cfg = DesignerConfig(max_new_tokens=max_new, reply_prefix=prefix)
  return Designer(None, tok, cfg, ValidatorConfig(), tmp_path, max_context=context)


def test_rows_train_the_reply_beside_other_seeds(tok, tmp_path):
  examples, _ = warmstart.library_examples("game", GAME_REPLY_HELPERS, 0, ValidatorConfig(), 0)
  examples = examples[:3]
  d = _designer(tok, tmp_path)
  rows, lengths, kept = warmstart.example_rows(d, examples, "game", seed=0, seeded=True)
  assert kept == [e.name for e in examples] and rows.batch_size == 3
  assert rows.seq_len % 256 == 0 and np.all(rows.advantages_B == 1.0)
  classes = {e.name: e.class_name for e in library_entries("game")}
  for i, ex in enumerate(examples):
    mask = rows.loss_mask_BT[i]
    first = int(np.argmax(mask))
    prompt = tok.decode(rows.tokens_BT[i, :first].tolist())
    assert prompt.endswith(GAME_REPLY_HELPERS)
    # the prompt shows library seeds, never the example's own environment
    assert f"class {classes[ex.name]}" not in prompt
    assert any(f"class {c}" in prompt for name, c in classes.items() if name != ex.name)
    reply = [t for t, m in zip(rows.tokens_BT[i].tolist(), mask) if m]
    assert reply[-1] == ChatFraming.from_tokenizer(tok).turn_end
    assert GAME_REPLY_HELPERS + tok.decode(reply[:-1]) == ex.reply
    assert lengths[ex.name] == len(reply)
  # a reply longer than max_new_tokens is dropped
  short = _designer(tok, tmp_path, max_new=32)
  rows, lengths, kept = warmstart.example_rows(short, examples, "game", seed=0, seeded=True)
  assert rows is None and kept == [] and len(lengths) == 3


def test_unseeded_rows_show_no_seed_and_a_document_when_the_run_has_them(tok, tmp_path):
  examples, _ = warmstart.library_examples("game", GAME_REPLY_HELPERS, 0, ValidatorConfig(), 0)
  d = _designer(tok, tmp_path)
  docs = ["The lighthouse keeper counted ships.", "Bees dance to share directions."]
  rows, _, kept = warmstart.example_rows(d, examples[:4], "game", 0, seeded=False, documents=docs)
  classes = [e.class_name for e in library_entries("game")]
  for i in range(len(kept)):
    first = int(np.argmax(rows.loss_mask_BT[i]))
    prompt = tok.decode(rows.tokens_BT[i, :first].tolist())
    assert not any(f"class {c}" in prompt for c in classes)
    assert any(doc in prompt for doc in docs)


def test_draw_batches_cycles_epochs():
  idx = warmstart.draw_batches(0, rows=5, steps=4, batch=3)
  assert idx.shape == (4, 3)
  flat = idx.reshape(-1).tolist()
  assert sorted(flat[:5]) == list(range(5)) and sorted(flat[5:10]) == list(range(5))


def _tiny_config(model_dir, tok_dir, prefix="helpers"):
  c = train.base_config()
  c.model.path, c.model.tokenizer = model_dir, tok_dir
  c.designer.reply_prefix = {"helpers": GAME_REPLY_HELPERS, "none": ""}[prefix]
  c.designer.max_new_tokens = 1024
  c.designer.max_context = 4096
  c.warm_start.steps = 6
  c.warm_start.batch = 2
  c.warm_start.learning_rate = 3e-3
  c.warm_start.variants = 0
  c.train.kl_coef = 0.01
  return c


@pytest.fixture(scope="module")
def policy_dirs():
  model_dir, _ = save_hf_model("qwen3", seed=3, vocab_size=512, num_hidden_layers=1)
  return model_dir, tiny_tokenizer_dir()


def test_warm_start_lowers_the_nll_and_resets_the_optimizer(policy_dirs, tmp_path, monkeypatch):
  from spade_jax import runner, sharding
  from spade_jax.rl.optimizer import make_optimizer
  from spade_jax.rl.train_state import create_train_state

  config = _tiny_config(*policy_dirs)
  # four short environments keep the tiny model's rows short
  every, _ = warmstart.library_examples("game", GAME_REPLY_HELPERS, 0, ValidatorConfig(), 0)
  few = sorted(every, key=lambda e: len(e.reply))[:4]
  monkeypatch.setattr(
    warmstart, "library_examples", lambda *a: (few, {"invalid": 1, "no_class": 0, "copy": 0})
  )
  mesh = sharding.make_mesh((1, -1, 1))
  model, _, tok = runner.load_policy(config, mesh)
  opt = make_optimizer(spade_config.optimizer_config(config))
  graphdef, state = create_train_state(model, opt, seed=0, with_reference=True, mesh=mesh)
  before = jax.tree.map(np.asarray, state.params)
  # a short prompt (the real one is ~2k tokens in the tiny vocabulary) keeps the rows short
  monkeypatch.setattr(
    prompts,
    "designer_messages",
    lambda skill, **kw: [{"role": "user", "content": f"Design a game for {skill.name}."}],
  )
  d = _designer(tok, tmp_path, max_new=config.designer.max_new_tokens, context=2048)
  state, metrics, record = warmstart.warm_start(graphdef, state, d, config, mesh)
  nll = record["nll"]
  assert len(nll) == 6 and nll[-1] < nll[0] - 0.5, nll
  assert metrics["warm/examples"] == 4 and metrics["warm/dropped_invalid"] == 1
  assert metrics["warm/skipped_steps"] == 0 and metrics["warm/dropped_too_long"] == 0
  assert metrics["warm/nll_first"] == nll[0]
  assert [r["trained"] for r in record["examples"]] == [True] * 4
  assert all(r["reply_tokens"] > 100 for r in record["examples"])
  after = jax.tree.map(np.asarray, state.params)
  assert any(
    not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after))
  )
  # the loop starts at update 0 with fresh moments, the warm policy as its KL reference
  assert int(state.step) == 0
  fresh = opt.init(state.params)
  for a, b in zip(jax.tree.leaves(state.opt_state), jax.tree.leaves(fresh)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  for a, b in zip(jax.tree.leaves(state.ref_params), jax.tree.leaves(state.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_nothing_fits_is_one_clear_error(policy_dirs, tmp_path):
  from spade_jax import runner, sharding
  from spade_jax.rl.optimizer import make_optimizer
  from spade_jax.rl.train_state import create_train_state

  config = _tiny_config(*policy_dirs)
  mesh = sharding.make_mesh((1, -1, 1))
  model, _, tok = runner.load_policy(config, mesh)
  opt = make_optimizer(spade_config.optimizer_config(config))
  graphdef, state = create_train_state(model, opt, seed=0, mesh=mesh)
  d = _designer(tok, tmp_path, max_new=64, context=4096)
  with pytest.raises(warmstart.WarmStartError, match=r"none of the \d+ library examples fits"):
    warmstart.warm_start(graphdef, state, d, config, mesh)


def test_config_checks():
  c = train.base_config()
  assert c.warm_start.steps == 0  # off by default
  for key, bad in (("steps", -1), ("batch", 0), ("learning_rate", 0.0), ("variants", -1)):
    c = train.base_config()
    c.warm_start[key] = bad
    with pytest.raises(ValueError, match=f"warm_start.{key}"):
      spade_config.check_config(c)


def test_run_wires_the_warm_start_once(policy_dirs, tmp_path, monkeypatch):
  """`train.train` runs the warm start when a run starts (its metrics in the first row,
  warm_start.json beside them) and not when the run resumes."""
  import test_loop

  test_loop.install_scripted_designer(monkeypatch)
  calls = []
  real = warmstart.warm_start

  def spy(graphdef, state, designer, config, mesh, documents):
    calls.append(designer.cfg.reply_prefix)
    every, _ = warmstart.library_examples("game", "", 0, ValidatorConfig(), 0)
    two = sorted(every, key=lambda e: len(e.reply))[:2]
    monkeypatch.setattr(warmstart, "library_examples", lambda *a: (two, {"invalid": 0}))
    # the loop's designer replies are scripted and short (16 tokens); the warm start's are
    # whole environments: it sees a copy of the designer with room for them
    roomy = copy.copy(designer)
    roomy.cfg = dataclasses.replace(designer.cfg, max_new_tokens=1536)
    return real(graphdef, state, roomy, config, mesh, documents)

  monkeypatch.setattr(warmstart, "warm_start", spy)
  config = test_loop.tiny_config(*policy_dirs)
  config.steps = 1
  config.designer.max_context = 4096
  config.warm_start.steps = 1
  config.warm_start.batch = 2
  workdir = tmp_path / "run"
  train.train(config, workdir)
  record = json.loads((workdir / "warm_start.json").read_text())
  assert len(record["nll"]) == 1 and record["metrics"]["warm/examples"] == 2
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert rows[0]["warm/steps"] == 1 and rows[0]["perf/warm_start_s"] > 0
  config.steps = 2
  train.train(config, workdir)  # resumes: no second warm start
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert len(calls) == 1 and len(rows) == 2 and "warm/steps" not in rows[1]
  # the loop trained the warm-started policy: its first update's NLL differs from a cold run's
  config.steps, config.warm_start.steps = 1, 0
  train.train(config, tmp_path / "cold")
  cold = [
    json.loads(line) for line in (tmp_path / "cold" / "metrics.jsonl").read_text().splitlines()
  ]
  assert "warm/steps" not in cold[0] and not (tmp_path / "cold" / "warm_start.json").exists()
  assert cold[0]["train/nll"] != rows[0]["train/nll"]


def test_designer_probe_samples_from_the_warm_started_policy(policy_dirs, tmp_path):
  """`experiments/designer_probe.py` with ``warm_start.steps``: the warm start runs first and
  its record is written beside the probe's."""
  import os
  import subprocess
  import sys
  from pathlib import Path

  model_dir, tok_dir = policy_dirs
  workdir = tmp_path / "probe"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  res = subprocess.run(
    [
      sys.executable,
      "experiments/designer_probe.py",
      "--config",
      "experiments/configs/smollm2_cpu.py:reply=helpers",
      "--workdir",
      str(workdir),
      "--rounds=1",
      f"--config.model.path={model_dir}",
      f"--config.model.tokenizer={tok_dir}",
      "--config.spade.num_games=1",
      "--config.spade.max_attempts=1",
      "--config.spade.corpus=none",
      "--config.designer.max_new_tokens=768",
      "--config.designer.max_context=4096",
      "--config.designer.hint_max_new_tokens=8",
      "--config.warm_start.steps=1",
      "--config.warm_start.batch=1",
      "--config.warm_start.variants=1",  # originals are copies of the seeds: variants train
    ],
    cwd=Path(__file__).resolve().parents[1],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert res.returncode == 0, res.stderr[-3000:]
  record = json.loads((workdir / "warm_start.json").read_text())
  assert len(record["nll"]) == 1 and record["metrics"]["warm/steps"] == 1
  assert any(r["trained"] for r in record["examples"])
  total = json.loads((workdir / "probe.json").read_text())["total"]
  assert total["designer/attempts"] == 1
