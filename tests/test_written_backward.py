"""The hand-written backward passes (SwiGLU MLP, grouped attention, log-prob head) equal the
derived ones, and ``LossConfig.loss_start`` leaves log-probs, losses and gradients unchanged."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax import trajectories as tj
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.models import block as bl
from spade_jax.rl import losses, update

F32 = jnp.float32


def _close(got, want, tol=1e-6):
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    np.testing.assert_allclose(a, b, atol=tol * max(1.0, np.abs(b).max()), rtol=0)


def _plain_mlp(h, wg, wu, wd, dt):
  gate = bl.dense(h, wg, "btd,df->btf", dt)
  up = bl.dense(h, wu, "btd,df->btf", dt)
  return bl.dense(jax.nn.silu(gate) * up, wd, "btf,fd->btd", dt)


@pytest.mark.parametrize("dt", [F32, jnp.bfloat16])
def test_swiglu_backward_equals_derived(dt):
  k = jax.random.split(jax.random.PRNGKey(0), 5)
  h = jax.random.normal(k[0], (2, 7, 16))
  ws = [jax.random.normal(k[i], s) * 0.3 for i, s in ((1, (16, 24)), (2, (16, 24)), (3, (24, 16)))]
  probe = jax.random.normal(k[4], (2, 7, 16))

  def loss(fn):
    return lambda h, *ws: jnp.sum(fn(h, *ws, jnp.dtype(dt)) * probe)

  assert np.array_equal(bl._swiglu(h, *ws, jnp.dtype(dt)), _plain_mlp(h, *ws, jnp.dtype(dt)))
  got = jax.grad(loss(bl._swiglu), argnums=(0, 1, 2, 3))(h, *ws)
  want = jax.grad(loss(_plain_mlp), argnums=(0, 1, 2, 3))(h, *ws)
  _close(got, want, 1e-6 if dt == F32 else 2e-2)


def test_grouped_attention_backward_equals_derived():
  k = jax.random.split(jax.random.PRNGKey(1), 4)
  B, T, K, G, H = 2, 6, 2, 2, 8
  q = jax.random.normal(k[0], (B, T, K, G, H))
  kk = jax.random.normal(k[1], (B, T, K, H))
  v = jax.random.normal(k[2], (B, T, K, H))
  probe = jax.random.normal(k[3], (B, T, K, G, H))
  valid = jnp.array([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0]], bool)  # row 1 query 0: all masked
  mask = (jnp.tril(jnp.ones((T, T), bool))[None] & valid[:, None, :])[:, None, None]

  def new(q, kk, v):
    return jnp.sum(bl._grouped_attention(q, kk, v, mask, F32) * probe)

  def old(q, kk, v):
    return jnp.sum(bl.masked_attention(q, kk, v, mask, F32, bl._SCORES, bl._OUT) * probe)

  assert np.array_equal(new(q, kk, v), old(q, kk, v))
  _close(jax.grad(new, (0, 1, 2))(q, kk, v), jax.grad(old, (0, 1, 2))(q, kk, v))


VOCAB = 97


def _derived_logprobs(h, w, tokens, temperature, start):
  """The former chunked log-softmax's arithmetic, differentiated by JAX."""
  logits = jnp.einsum("btd,dv->btv", h[:, :-1], w) / temperature
  lse = jax.nn.logsumexp(logits, -1)
  picked = jnp.take_along_axis(logits, tokens[:, 1:, None], -1)[..., 0]
  p = jnp.exp(logits - lse[..., None])
  ent = lse - jnp.sum(p * logits, -1)
  zero = jnp.zeros((h.shape[0], 1))
  logp, ent = jnp.concatenate([zero, picked - lse], 1), jnp.concatenate([zero, ent], 1)
  keep = (jnp.arange(h.shape[1]) >= max(start, 1))[None]
  return jnp.where(keep, logp, 0.0), jnp.where(keep, ent, 0.0)


@pytest.mark.parametrize("chunk", [4, 100])  # several chunks (recomputed logits), one (kept)
@pytest.mark.parametrize("start", [0, 5])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_logprob_head_equals_derived(chunk, start, entropy_grad):
  k = jax.random.split(jax.random.PRNGKey(2), 5)
  B, T, D = 3, 11, 8
  h = jax.random.normal(k[0], (B, T, D))
  w = jax.random.normal(k[1], (D, VOCAB)) * 0.5
  tokens = jax.random.randint(k[2], (B, T), 0, VOCAB)
  a, b = jax.random.normal(k[3], (B, T)), jax.random.normal(k[4], (B, T))

  def ours(h, w):
    logp, ent = losses.token_logprobs(
      h, w, tokens, temperature=0.7, chunk=chunk, entropy_grad=entropy_grad, start=start
    )
    return logp, ent

  def derived(h, w):
    logp, ent = _derived_logprobs(h, w, tokens, 0.7, start)
    return logp, ent if entropy_grad else jax.lax.stop_gradient(ent)

  def scalar(fn):
    return lambda h, w: jnp.sum(fn(h, w)[0] * a + fn(h, w)[1] * b)

  _close(ours(h, w), derived(h, w), 1e-6)
  _close(jax.grad(scalar(ours), (0, 1))(h, w), jax.grad(scalar(derived), (0, 1))(h, w), 1e-6)
  if start:
    assert np.all(np.asarray(ours(h, w)[0][:, :start]) == 0)


def test_one_chunk_equals_several():
  k = jax.random.split(jax.random.PRNGKey(3), 3)
  h = jax.random.normal(k[0], (2, 20, 8))
  w = jax.random.normal(k[1], (8, VOCAB))
  tokens = jax.random.randint(k[2], (2, 20), 0, VOCAB)

  def f(chunk):
    return lambda h, w: losses.token_logprobs(h, w, tokens, chunk=chunk, entropy_grad=True)

  _close(f(256)(h, w), f(3)(h, w), 1e-6)
  g = lambda c: jax.grad(lambda h, w: jnp.sum(sum(f(c)(h, w))), (0, 1))(h, w)  # noqa: E731
  _close(g(256), g(3), 1e-6)


def _model_and_batch(prompt):
  cfg = TransformerConfig(
    vocab_size=VOCAB,
    embed_dim=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    mlp_dim=48,
  )
  model = Transformer(cfg, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  B, T = 4, 16
  mask = np.zeros((B, T), np.float32)
  for b, p in enumerate(prompt):
    mask[b, p : T - b] = 1.0  # prompts of different lengths, right padding
  batch = tj.Trajectories(
    tokens_BT=rng.integers(0, VOCAB, (B, T)).astype(np.int32),
    loss_mask_BT=mask,
    rollout_logprobs_BT=(mask * -rng.uniform(3, 6, (B, T))).astype(np.float32),
    advantages_B=rng.normal(size=B).astype(np.float32),
    role_B=np.zeros(B, np.int32),
    rewards_B=np.zeros(B, np.float32),
    group_id_B=np.zeros(B, np.int32),
    valid_B=np.ones(B, bool),
    turns_B=np.ones(B, np.int32),
  )
  return model, jax.tree.map(jnp.asarray, batch)


def test_loss_start_leaves_loss_and_gradients_unchanged():
  model, batch = _model_and_batch([6, 7, 9, 6])
  graphdef, params = nnx.split(model, nnx.Param)
  base = losses.LossConfig(entropy_coef=0.01)

  def run(cfg):
    return jax.jit(lambda p: update.loss_and_grads(graphdef, p, batch, cfg))(params)

  (g0, s0), (g1, s1) = run(base), run(losses.LossConfig(entropy_coef=0.01, loss_start=6))
  _close(s1, s0, 1e-6)
  _close(g1, g0, 1e-6)


def test_broken_loss_start_gives_nan_loss():
  model, batch = _model_and_batch([6, 3, 9, 6])  # row 1 trains from position 3
  graphdef, params = nnx.split(model, nnx.Param)
  _, stats = update.loss_and_grads(graphdef, params, batch, losses.LossConfig(loss_start=6))
  assert np.isnan(float(stats["loss"]))
  with pytest.raises(ValueError, match="loss_start"):
    losses.LossConfig(loss_start=-1)
