"""spade_jax/runner.py (the run skeleton of both loops) and the tiny loop's typed config."""

import dataclasses
import json
import sys
from pathlib import Path

import jax.numpy as jnp
import ml_collections
import pytest

from spade_jax import runner
from spade_jax.tiny.config import TinyRunConfig, tiny_config, typed_config

REPO = Path(__file__).resolve().parents[1]


def small_config(**kw):
  c = ml_collections.ConfigDict(
    dict(seed=0, steps=3, checkpoint_every=2, keep_checkpoints=2, plot_every=0, progress=False)
  )
  c.update(kw)
  return c


def test_resume_config_check_allows_only_resumable_changes(tmp_path):
  runner.check_resume_config(tmp_path, small_config())
  assert json.loads((tmp_path / "config.json").read_text())["steps"] == 3
  runner.check_resume_config(tmp_path, small_config(steps=5))  # resumable: rewritten
  assert json.loads((tmp_path / "config.json").read_text())["steps"] == 5
  with pytest.raises(runner.UserError, match=r"different config \(fields \['seed'\]\)"):
    runner.check_resume_config(tmp_path, small_config(steps=5, seed=1))


def test_fields_added_since_the_run_started_resume_at_their_defaults(tmp_path):
  """A workdir written before the code grew a field resumes when the field holds its default
  (the run went on without it), and is refused when it does not; paths are dotted."""
  defaults = small_config(train=dict(lr=1.0, new_knob=0.0), seed=0)
  old = small_config(train=dict(lr=1.0))  # written by code without train.new_knob
  (tmp_path / "config.json").write_text(json.dumps(runner.config_json(old)))
  runner.check_resume_config(tmp_path, small_config(train=dict(lr=1.0, new_knob=0.0)), defaults)
  stored = json.loads((tmp_path / "config.json").read_text())
  assert stored["train"]["new_knob"] == 0.0  # rewritten with the field
  (tmp_path / "config.json").write_text(json.dumps(runner.config_json(old)))
  with pytest.raises(runner.UserError, match=r"fields \['train.new_knob'\]"):
    runner.check_resume_config(tmp_path, small_config(train=dict(lr=1.0, new_knob=0.5)), defaults)
  with pytest.raises(runner.UserError, match=r"fields \['train.new_knob'\]"):  # no defaults
    runner.check_resume_config(tmp_path, small_config(train=dict(lr=1.0, new_knob=0.0)))
  with pytest.raises(runner.UserError, match=r"fields \['train.lr'\]"):
    runner.check_resume_config(tmp_path, small_config(train=dict(lr=2.0, new_knob=0.0)), defaults)
  assert runner.config_differences({"steps": 1, "a": {"b": 1}}, {"steps": 9, "a": {}}) == ["a.b"]


def test_truncate_metrics_drops_steps_from_start(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in range(4)) + "\n")
  runner.truncate_metrics(path, 2)
  assert [json.loads(ln)["step"] for ln in path.read_text().splitlines()] == [0, 1]
  runner.truncate_metrics(tmp_path / "none.jsonl", 0)  # no file: nothing to do


def test_run_saves_restores_and_closes(tmp_path):
  config = small_config()
  tree = {"w": jnp.arange(3.0)}
  closed = []
  with runner.Run(config, tmp_path / "run", ("envs", "eval")) as run:
    assert (run.workdir / "envs").is_dir() and (run.workdir / "config.json").exists()
    run.open_checkpoints()
    assert run.restore(tree) == (0, tree, None)
    run.open_metrics()
    run.open_progress(("x",))
    run.on_close(lambda: closed.append(True))
    for step in range(2):
      run.log(step, {"a/x": float(step)})
      assert run.save_due(step) == (step == 1)
      if run.save_due(step):
        run.save(step, {"w": tree["w"] + step}, {"memo": [step]})
      run.plot_if_due(step)
      run.advance({"a/x": float(step)})
    run.log(2, {"a/x": 2.0})  # a step "killed" before its checkpoint
  assert closed == [True] and run.ckpt is None and run.writer is None
  with runner.Run(config, tmp_path / "run") as run:
    run.open_checkpoints()
    start, got, host = run.restore(tree)
    assert start == 2 and host == {"next_step": 2, "memo": [1]}
    assert got["w"].tolist() == [1.0, 2.0, 3.0]
  rows = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows] == [0, 1]  # step 2's row went with the restore


def test_unusable_checkpoint_is_a_user_error(tmp_path):
  with runner.Run(small_config(), tmp_path) as run:
    run.open_checkpoints()
    run.save(0, {"w": jnp.zeros(3)}, {})
  with runner.Run(small_config(), tmp_path) as run:
    run.open_checkpoints()
    with pytest.raises(runner.UserError, match="^checkpoint: .*different state layout"):
      run.restore({"v": jnp.zeros(3)})


def test_typed_config_mirrors_the_config_dict():
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  c = tiny.get_config("smoke")
  t = typed_config(c)
  assert isinstance(t, TinyRunConfig) and typed_config(t) is t

  def as_dict(x):
    return {
      k: as_dict(v) if dataclasses.is_dataclass(v) else v for k, v in dataclasses.asdict(x).items()
    }

  assert as_dict(t) == c.to_dict()
  assert t.spade.plateau == tuple(c.spade.plateau) and t.families == ()
  with pytest.raises(dataclasses.FrozenInstanceError):
    t.spade.num_games = 3


def test_typed_config_refuses_unknown_keys_and_bad_values():
  c = tiny_config()
  c.train.no_such_option = 1
  with pytest.raises(ValueError, match=r"section train: keys without a TrainSection field"):
    typed_config(c)
  c = tiny_config()
  c.spade.plateau = (0.5, 0.4, 0.6, 0.85)
  with pytest.raises(ValueError, match="spade.plateau"):
    typed_config(c)
