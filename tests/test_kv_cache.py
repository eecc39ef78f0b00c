"""Decode cache: layout round trip with the model's KVCache, and the single-token decode forward
equal to the model's full forward (every branch: GQA, qkv bias, qk-norm, masked slots)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.engine.kv_cache import (
  decode_forward,
  from_model_cache,
  prepare_weights,
  to_model_cache,
)
from spade_jax.models import Transformer, TransformerConfig, init_cache

CFG = TransformerConfig(
  vocab_size=97,
  embed_dim=32,
  num_layers=2,
  num_heads=4,
  num_kv_heads=2,
  head_dim=8,
  mlp_dim=48,
  qk_norm=True,
  qkv_bias=True,
  rope_theta=500.0,
)


def _model():
  """A random model with every parameter (norms and biases too) random, made in numpy."""
  graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(CFG, rngs=nnx.Rngs(0))))
  rng = np.random.default_rng(1)

  def fill(path, x):
    base = 1.0 if "norm" in jax.tree_util.keystr(path) else 0.0
    return jnp.asarray(base + 0.2 * rng.standard_normal(x.shape), jnp.float32)

  return nnx.merge(graphdef, jax.tree_util.tree_map_with_path(fill, abstract))


@functools.partial(jax.jit, static_argnums=0)
def _prefill(graphdef, params, tokens, positions, mask):
  model = nnx.merge(graphdef, params)
  cache = init_cache(CFG, tokens.shape[0], 16)
  _, cache = model.hidden(tokens, positions, cache=cache, mask_BT=mask)
  return cache


@functools.partial(jax.jit, static_argnums=0)
def _decode(graphdef, params, token, position, cache, mask):
  weights = prepare_weights(nnx.merge(graphdef, params))
  return decode_forward(CFG, weights, token, position, cache, mask)


@functools.partial(jax.jit, static_argnums=0)
def _full(graphdef, params, tokens):
  return nnx.merge(graphdef, params)(tokens)


def test_decode_forward_equals_full_forward_with_padding_and_masked_steps():
  model = _model()
  graphdef, params = nnx.split(model)
  rng = np.random.default_rng(0)
  seqs = [list(rng.integers(0, 97, 5)), list(rng.integers(0, 97, 3))]
  # left padding: sequence 1 occupies slots 2..4 with positions 0..2
  tokens = jnp.array([seqs[0], [0, 0] + seqs[1]])
  positions = jnp.array([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
  mask = jnp.array([[True] * 5, [False, False, True, True, True]])
  model_cache = _prefill(graphdef, params, tokens, positions, mask)
  cache = from_model_cache(model_cache)
  back = to_model_cache(cache)
  for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(model_cache)):
    np.testing.assert_array_equal(a, b)

  # sequence 1 skips steps 1 and 3 (its slot is written but invalid, as for a waiting seq)
  active = [[True, True], [True, False], [True, True], [True, False], [True, True]]
  got = [[], []]  # (position in the sequence, logits after it)
  for a0, a1 in active:
    new = rng.integers(0, 97, 2)
    mask_B = jnp.array([a0, a1])
    pos_B = jnp.array([len(seqs[0]), len(seqs[1])])
    logits, cache = _decode(graphdef, params, jnp.asarray(new), pos_B, cache, mask_B)
    for b in range(2):
      if mask_B[b]:
        seqs[b].append(int(new[b]))
        got[b].append((len(seqs[b]) - 1, np.asarray(logits[b])))
  for b in range(2):
    full = _full(graphdef, params, jnp.array([seqs[b]]))[0]
    for pos, logits in got[b]:
      np.testing.assert_allclose(logits, full[pos], atol=1e-5, rtol=0, err_msg=f"{b} {pos}")
  assert int(cache.index) == 10
  np.testing.assert_array_equal(cache.valid_BS[1, 5:10], [True, False, True, False, True])
