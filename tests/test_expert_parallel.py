"""Expert parallelism and the router's load-balancing loss in the GRPO update: a random tiny
Qwen3-MoE on a data=2 x fsdp=2 x expert=2 x tensor=1 mesh of the 8 fake devices gives the
unsharded forward, update and greedy sampler; its expert weights split over the expert axis;
the aux loss enters the loss (and the router's gradient) only for MoE models with a coefficient
> 0; three-entry mesh shapes keep working."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec

from spade_jax import sharding
from spade_jax import trajectories as tj
from spade_jax.engine.generate import generate
from spade_jax.models import Transformer, TransformerConfig, moe
from spade_jax.rl import losses, train_state, update
from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer
from spade_jax.spade.config import base_config, check_config, loss_config

DENSE = TransformerConfig(
  vocab_size=64, embed_dim=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64
)
MOE = TransformerConfig(
  model_type="qwen3_moe",
  vocab_size=64,
  embed_dim=32,
  num_layers=2,
  num_heads=4,
  num_kv_heads=2,
  head_dim=8,
  mlp_dim=64,
  qk_norm=True,
  num_experts=8,
  num_experts_per_tok=2,
  moe_mlp_dim=16,
)
MESH4 = (2, 2, 2, 1)  # data, fsdp, expert, tensor
OPT = OptimizerConfig(learning_rate=1e-2, eps=1e-6)
AUX = losses.LossConfig(router_aux_coef=0.5, logprob_chunk=5)
B, T = 8, 12


def _model(cfg=MOE, seed=0):
  model = Transformer(cfg, rngs=nnx.Rngs(seed))
  if cfg.num_experts:  # a sharper router than the init's, so tokens spread over the experts
    model.blocks.router[...] = model.blocks.router[...] * 8.0
  return model


def _batch(seed=0) -> tj.Trajectories:
  rng = np.random.default_rng(seed)
  lengths = rng.integers(6, T + 1, B - 1)
  toks = [rng.integers(1, MOE.vocab_size, n).tolist() for n in lengths]
  masks = [(np.arange(n) >= 3).astype(float).tolist() for n in lengths]
  lps = [(-rng.uniform(2.5, 5.5, n)).tolist() for n in lengths]
  batch = tj.from_sequences(
    toks,
    masks,
    lps,
    role=[tj.ROLE_AGENT] * (B - 1),
    rewards=rng.integers(0, 2, B - 1),
    group_id=np.zeros(B - 1, int),
    seq_len=T,
  )
  batch = tj.pad_batch(batch, B)  # one pad row
  return batch.replace(advantages_B=rng.normal(size=B).astype(np.float32) * batch.valid_B)


def _max_diff(a, b):
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
  )


def _update(loss_cfg, mesh=None, cfg=MOE, micro_batches=1):
  graphdef, state = train_state.create_train_state(
    _model(cfg), make_optimizer(OPT), seed=1, mesh=mesh
  )
  step = update.make_update(
    graphdef, loss_cfg, OPT, micro_batches=micro_batches, mesh=mesh, state=state
  )
  batch = _batch()
  if mesh is not None:
    batch = jax.device_put(batch, tj.shardings(mesh, batch))
  return step(state, batch)


def test_mesh_axes_and_rules():
  mesh = sharding.make_mesh(MESH4)
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "expert": 2, "tensor": 1}
  assert sharding.make_mesh((2, -1, 2, 1)).shape["fsdp"] == 2
  assert mesh.axis_names == sharding.MESH_AXES
  # a three-entry shape: the (data, fsdp, tensor) mesh of before, no expert axis
  assert sharding.make_mesh((1, -1, 1)).axis_names == ("data", "fsdp", "tensor")
  with pytest.raises(ValueError, match="3 entries"):
    sharding.make_mesh((2, 4))
  spec = sharding.logical_to_spec
  assert spec(("batch", None), (8, 4), mesh) == PartitionSpec(("data", "fsdp", "expert"), None)
  expert_w = ("expert", "embed", "mlp")
  # experts over expert x fsdp (8 experts, 2 per device pair); the hidden dim keeps nothing
  assert spec(expert_w, (8, 32, 16), mesh) == PartitionSpec(("expert", "fsdp"), None, None)
  # 6 experts: expert x fsdp does not divide them, so the hidden dim takes fsdp
  assert spec(expert_w, (6, 32, 16), mesh) == PartitionSpec("expert", "fsdp", None)
  assert spec(("vocab", "embed"), (64, 32), mesh) == PartitionSpec(None, ("fsdp", "expert"))
  # the same names on a three-axis mesh: what they were before the expert axis existed
  mesh3 = sharding.make_mesh((2, 2, 2))
  assert spec(expert_w, (8, 32, 16), mesh3) == PartitionSpec("fsdp", None, "tensor")
  assert spec(("batch", None), (8, 4), mesh3) == PartitionSpec(("data", "fsdp"), None)


def test_config_and_cli_meshes_of_three_or_four_entries():
  from spade_jax.eval import cli

  c = base_config()
  check_config(c)  # (1, -1, 1)
  c.mesh.shape = MESH4
  check_config(c)
  c.mesh.shape = (1, 8)
  with pytest.raises(ValueError, match="mesh.shape must have 3 entries"):
    check_config(c)
  assert loss_config(base_config()).router_aux_coef == 0.0
  c = base_config()
  c.train.router_aux_coef = -1.0
  with pytest.raises(ValueError, match="router_aux_coef"):
    check_config(c)
  for text, axes in (("1,1,1", 3), ("2,2,2,1", 4), ("1,1,2,1", 4)):
    mesh = cli._mesh(argparse.Namespace(mesh=text), None)
    assert len(mesh.axis_names) == axes and mesh.size == np.prod([int(x) for x in text.split(",")])


@pytest.fixture(scope="module")
def unsharded():
  """One unsharded program: the forward's logits and router logits, and the loss and gradients
  with the aux loss off and on (with the aux loss computed directly from the router logits)."""
  graphdef, params = train_state.split_model(_model())
  batch = jax.tree.map(jnp.asarray, _batch())

  def fn(p):
    logits, router = nnx.merge(graphdef, p).router_logits(batch.tokens_BT)
    off = update.loss_and_grads(graphdef, p, batch, losses.LossConfig(logprob_chunk=5))
    on = update.loss_and_grads(graphdef, p, batch, AUX)
    aux = moe.load_balancing_loss(MOE, router, update.aux_loss_mask(batch))
    return logits, router, off, on, aux

  return batch, jax.jit(fn)(params)


def test_sharded_forward_and_expert_weights_over_the_expert_axis(unsharded):
  batch, (want_logits, want_router, *_) = unsharded
  assert np.std(np.asarray(want_router)) > 0.5  # routing differs between tokens
  mesh = sharding.make_mesh(MESH4)
  sharded = sharding.shard_model(_model(), mesh)
  for name in ("moe_gate", "moe_up", "moe_down"):  # [L, E, ...]
    w = getattr(sharded.blocks, name)[...]
    assert w.sharding.spec[1] == ("expert", "fsdp"), (name, w.sharding.spec)
    assert w.addressable_shards[0].data.shape[1] == MOE.num_experts // 4
  assert sharded.embed[...].sharding.spec == PartitionSpec(None, ("fsdp", "expert"))
  with sharding.use_mesh(mesh):
    logits, router = jax.jit(lambda t: sharded.router_logits(t))(batch.tokens_BT)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(want_logits), atol=1e-5)
  np.testing.assert_allclose(np.asarray(router), np.asarray(want_router), atol=1e-5)


def test_sharded_update_matches_unsharded():
  want_state, want = _update(AUX)
  state, got = _update(AUX, sharding.make_mesh(MESH4))
  spec = state.params["blocks"]["moe_down"][...].sharding.spec
  assert spec[1] == ("expert", "fsdp")
  assert float(got["train/update_skipped"]) == 0.0 and float(got["train/router_aux_loss"]) > 0
  for key in ("train/loss", "train/pg_loss", "train/router_aux_loss", "train/grad_norm"):
    np.testing.assert_allclose(float(got[key]), float(want[key]), rtol=1e-5, atol=1e-6)
  assert _max_diff(state.params, want_state.params) < 1e-5
  assert _max_diff(state.opt_state, want_state.opt_state) < 1e-5


def test_sharded_greedy_sampler_matches_unsharded():
  model = _model()
  prompts = [p.tolist() for p in np.random.default_rng(5).integers(1, MOE.vocab_size, (4, 5))]
  prompts[1] = prompts[1][:3]
  want = generate(model, prompts, max_new_tokens=6, greedy=True)
  mesh = sharding.make_mesh(MESH4)
  got = generate(
    sharding.shard_model(_model(), mesh), prompts, max_new_tokens=6, greedy=True, mesh=mesh
  )
  assert got.tokens == want.tokens
  for a, b in zip(got.logprobs, want.logprobs, strict=True):
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_aux_loss_enters_the_loss_and_the_router_gradient_only_when_asked(unsharded):
  batch, (_, _, (g0, s0), (g1, s1), aux) = unsharded
  assert "router_aux_loss" not in s0
  np.testing.assert_allclose(float(s1["router_aux_loss"]), float(aux), rtol=1e-5)
  np.testing.assert_allclose(float(s1["loss"]), float(s0["loss"]) + 0.5 * float(aux), rtol=1e-5)
  np.testing.assert_allclose(float(s1["pg_loss"]), float(s0["pg_loss"]), rtol=1e-6)
  assert _max_diff(g1["blocks"]["router"], g0["blocks"]["router"]) > 1e-4  # pushes the router
  # ... and nothing downstream of every router (the final norm)
  assert _max_diff(g1["final_norm"], g0["final_norm"]) < 1e-7
  mask = update.aux_loss_mask(batch)
  assert not bool(mask[-1].any()) and bool(mask[0, 0])  # the pad row counts no token
  # a micro-batch of pad rows only: no aux loss, not NaN (the update would skip the step)
  no_rows = moe.load_balancing_loss(MOE, jnp.ones((2, 1, 3, 8)), jnp.zeros((1, 3), bool))
  assert float(no_rows) == 0.0


def test_dense_model_ignores_the_coefficient():
  graphdef, params = train_state.split_model(_model(DENSE))
  batch = jax.tree.map(jnp.asarray, _batch())

  def lowered(cfg):
    return jax.jit(lambda p: update.loss_and_grads(graphdef, p, batch, cfg)).lower(params)

  plain = losses.LossConfig(logprob_chunk=5)
  assert lowered(plain).as_text() == lowered(AUX).as_text()
