"""TrainState creation: sharded placement, optimizer state layout, reference copy, abstracts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax import sharding
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl import train_state
from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer

CFG = TransformerConfig(
  vocab_size=32, embed_dim=16, num_layers=2, num_heads=2, num_kv_heads=2, head_dim=8, mlp_dim=32
)


@pytest.fixture(scope="module")
def sharded():
  mesh = sharding.make_mesh((1, 4, 2))
  model = Transformer(CFG, rngs=nnx.Rngs(3))
  want = jax.tree.map(np.asarray, nnx.split(model)[1])
  graphdef, state = train_state.create_train_state(
    model, make_optimizer(OptimizerConfig()), seed=5, with_reference=True, mesh=mesh
  )
  return mesh, graphdef, state, want


def test_state_contents(sharded):
  _, graphdef, state, want = sharded
  assert int(state.step) == 0 and state.step.dtype == jnp.int32
  np.testing.assert_array_equal(state.rng, jax.random.PRNGKey(5))
  for a, b, r in zip(
    jax.tree.leaves(state.params), jax.tree.leaves(want), jax.tree.leaves(state.ref_params)
  ):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(r, b)
    ptr = lambda x: x.addressable_shards[0].data.unsafe_buffer_pointer()
    assert ptr(a) != ptr(r)  # no aliasing: the donated state must not hold a buffer twice
  tokens = jnp.arange(12, dtype=jnp.int32).reshape(2, 6) % CFG.vocab_size
  model = train_state.with_params(graphdef, state)
  ref = Transformer(CFG, rngs=nnx.Rngs(3))
  np.testing.assert_allclose(model(tokens), ref(tokens), atol=1e-6)


def test_params_and_moments_are_sharded_by_logical_axes(sharded):
  mesh, _, state, _ = sharded
  q = state.params["blocks"]["q"][...]
  assert q.sharding.spec == sharding.logical_to_spec(
    ("layers", "embed", "heads", "head_dim"), q.shape, mesh
  )
  assert q.sharding.spec[1] == "fsdp" and q.sharding.spec[2] == "tensor"
  adam = state.opt_state[1][0]  # chain(clip, adamw) -> adamw's ScaleByAdamState
  for moments in (adam.mu, adam.nu):
    for p, m in zip(jax.tree.leaves(state.params), jax.tree.leaves(moments)):
      assert m.sharding == p.sharding and m.dtype == jnp.float32
  assert state.step.sharding.is_fully_replicated and state.rng.sharding.is_fully_replicated


def test_abstract_state_keeps_shardings(sharded):
  _, _, state, _ = sharded
  abstract = train_state.abstract_state(state)
  for a, s in zip(jax.tree.leaves(abstract), jax.tree.leaves(state)):
    assert isinstance(a, jax.ShapeDtypeStruct)
    assert (a.shape, a.dtype, a.sharding) == (s.shape, s.dtype, s.sharding)
  no_ref = train_state.create_train_state(Transformer(CFG, rngs=nnx.Rngs(0)), make_optimizer())[1]
  assert no_ref.ref_params is None


def test_rejects_low_precision_master_weights():
  model = nnx.eval_shape(
    lambda: Transformer(CFG.replace(param_dtype=jnp.bfloat16), rngs=nnx.Rngs(0))
  )
  with pytest.raises(ValueError, match="master weights must be float32"):
    train_state.split_model(model)
