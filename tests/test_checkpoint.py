"""Checkpoints: bit-identical sharded round trip, host side-car, keep-last-N, atomicity, and
clear errors for mismatched or corrupt checkpoints."""

import glob
import json
import os
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from spade_jax import checkpoint as ckpt
from spade_jax import sharding
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl import train_state
from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer

CFG = TransformerConfig(
  vocab_size=32, embed_dim=16, num_layers=2, num_heads=2, num_kv_heads=2, head_dim=8, mlp_dim=32
)
HOST = {
  "env_pool": [{"source": "class AEnv: ...", "skill": "math"}],
  "memory": [],
  "tracker": {"fast": 0.25, "slow": 0.125},
  "iteration": 7,
}


@pytest.fixture(scope="module")
def mesh():
  return sharding.make_mesh((1, 4, 2))


@pytest.fixture(scope="module")
def state(mesh):
  _, st = train_state.create_train_state(
    Transformer(CFG, rngs=nnx.Rngs(0)), make_optimizer(), seed=3, with_reference=True, mesh=mesh
  )
  # make every part of the state non-trivial (moments, count, rng, step)
  noise = lambda x, k: x + jax.random.normal(jax.random.PRNGKey(k), x.shape, x.dtype) * 1e-3
  leaves, treedef = jax.tree.flatten(st.opt_state)
  leaves = [noise(x, i) if x.dtype == np.float32 else x + 3 for i, x in enumerate(leaves)]
  return st.replace(
    step=st.step + 11,
    opt_state=jax.tree.unflatten(treedef, leaves),
    rng=jax.random.split(st.rng)[0],
  )


def _assert_identical(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    assert x.dtype == y.dtype and x.shape == y.shape
    assert x.sharding == y.sharding, (x.sharding, y.sharding)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture()
def saved(tmp_path, state):
  with ckpt.Checkpointer(tmp_path / "ckpt", model_config=CFG, max_to_keep=2) as c:
    for step in (1, 2, 3):
      c.save(step, state, {**HOST, "iteration": step})
  return tmp_path / "ckpt"


def test_round_trip_is_bit_identical_and_sharded(saved, state):
  with ckpt.Checkpointer(saved, model_config=CFG) as c:
    assert c.all_steps() == [2, 3]  # keep-last-2
    restored, host = c.restore(train_state.abstract_state(state))
    _assert_identical(restored, state)
    assert host == {**HOST, "iteration": 3}
    restored2, host2 = c.restore(state, step=2)  # a concrete target works too
    _assert_identical(restored2, state)
    assert host2["iteration"] == 2
    assert c.restore_host_state()["tracker"] == HOST["tracker"]


def test_compute_only_config_fields_may_differ(saved, state):
  with ckpt.Checkpointer(saved, model_config=CFG.replace(remat="full", dtype="bfloat16")) as c:
    restored, _ = c.restore(train_state.abstract_state(state))
  _assert_identical(restored, state)


def test_mismatched_model_config_is_refused(saved, state):
  with ckpt.Checkpointer(saved, model_config=CFG.replace(embed_dim=32, mlp_dim=48)) as c:
    with pytest.raises(ckpt.CheckpointMismatchError, match="embed_dim: checkpoint=16 current=32"):
      c.restore(train_state.abstract_state(state))


def test_mismatched_state_layout_is_refused(saved, mesh):
  other = make_optimizer(OptimizerConfig(name="adam", grad_clip_norm=None))
  _, st = train_state.create_train_state(Transformer(CFG, rngs=nnx.Rngs(0)), other)
  with ckpt.Checkpointer(saved, model_config=CFG) as c:
    with pytest.raises(ckpt.CheckpointMismatchError, match="different state layout"):
      c.restore(train_state.abstract_state(st))


@pytest.mark.parametrize("damage", ["manifest", "arrays", "host_json", "state_dir"])
def test_corrupt_checkpoint_raises_clear_error(saved, state, damage):
  step_dir = saved / "3"
  if damage == "manifest":
    targets = glob.glob(str(step_dir / "state" / "**" / "manifest.ocdbt"), recursive=True)
  elif damage == "arrays":
    targets = glob.glob(str(step_dir / "state" / "**" / "d" / "*"), recursive=True)
  elif damage == "host_json":
    targets = [str(step_dir / "host" / "metadata")]
  else:
    shutil.rmtree(step_dir / "state")
    targets = []
  for path in targets:
    with open(path, "wb") as f:
      f.write(b"\x00garbage")
  with ckpt.Checkpointer(saved, model_config=CFG) as c:
    with pytest.raises(ckpt.CheckpointCorruptError, match="checkpoint step 3 .* unreadable"):
      c.restore(train_state.abstract_state(state))
    restored, host = c.restore(train_state.abstract_state(state), step=2)  # older one intact
  _assert_identical(restored, state)


def test_missing_checkpoint_and_unfinished_save(tmp_path, saved, state):
  with ckpt.Checkpointer(tmp_path / "empty", model_config=CFG) as c:
    assert c.latest_step() is None
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint found"):
      c.restore(state)
  # a save that died half-way leaves only a temporary directory, which is never restored
  shutil.copytree(saved / "3", saved / "9.orbax-checkpoint-tmp-1234")
  with ckpt.Checkpointer(saved, model_config=CFG) as c:
    assert c.latest_step() == 3
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint for step 9"):
      c.restore(state, step=9)


def test_host_state_must_be_json(tmp_path, state):
  with ckpt.Checkpointer(tmp_path / "c", model_config=CFG) as c:
    with pytest.raises(TypeError, match="not JSON-serialisable"):
      c.save(1, state, {"bad": object()})
    c.save(2, state, {"np": np.float32(1.5), "arr": np.arange(3)})
    assert c.restore_host_state() == {"np": 1.5, "arr": [0, 1, 2]}
  meta = json.loads(open(os.path.join(tmp_path / "c", "2", "meta", "metadata")).read())
  assert meta["model_config"]["embed_dim"] == 16


def test_async_save_survives_donating_the_state_right_after(tmp_path, state):
  """The training loop donates the state to the next update right after ``save`` returns; the
  asynchronous write must already hold its own copy."""
  copy = jax.tree.map(lambda x: x.copy(), state)
  want = jax.tree.map(np.array, state)  # (a numpy view of `copy` would block its donation)
  donate = jax.jit(lambda s: jax.tree.map(lambda x: x * 2, s), donate_argnums=0)
  with ckpt.Checkpointer(tmp_path / "c", model_config=CFG, async_save=True) as c:
    c.save(1, copy)
    clobbered = donate(copy)
    assert jax.tree.leaves(copy.params)[0].is_deleted()
    restored, _ = c.restore(train_state.abstract_state(clobbered))
  for got, w in zip(jax.tree.leaves(restored), jax.tree.leaves(want), strict=True):
    np.testing.assert_array_equal(np.asarray(got), w)
