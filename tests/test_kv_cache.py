"""Decode cache: layout round trip with the model's KVCache, and the single-token decode forward
equal to the model's full forward (every branch: GQA, qkv bias, qk-norm, masked slots, the
attention windows over a large cache's used prefix)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.engine.kv_cache import (
  decode_forward,
  decode_windows,
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


def test_decode_windows():
  assert decode_windows(256) == (64, 128, 256)
  assert decode_windows(256, cpu=True) == (64, 256)
  assert decode_windows(4096, cpu=True) == (64, 128, 256, 512, 1024, 4096)
  assert decode_windows(100) == (100,) and decode_windows(128, cpu=True) == (128,)
  assert decode_windows(96) == (96,) and decode_windows(48) == (48,)
  assert decode_windows(300) == (75, 150, 300)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _prefill_into(graphdef, params, slots, tokens):
  model = nnx.merge(graphdef, params)
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  cache = init_cache(CFG, tokens.shape[0], slots)
  _, cache = model.hidden(tokens, positions, cache=cache)
  return cache


def test_decode_in_a_large_cache_reads_only_its_used_prefix_and_equals_the_full_forward():
  """A 512-slot cache decoded from slot 60 to 139: the steps cross the windows at 64 and 128
  slots (both backends' policies), and every step's logits equal the full forward's."""
  model = _model()
  graphdef, params = nnx.split(model)
  rng = np.random.default_rng(3)
  seq = list(rng.integers(0, 97, 60))
  cache = from_model_cache(_prefill_into(graphdef, params, 512, jnp.array([seq])))
  steps = []
  for _ in range(80):
    token = int(rng.integers(0, 97))
    logits, cache = _decode(
      graphdef, params, jnp.array([token]), jnp.array([len(seq)]), cache, jnp.array([True])
    )
    seq.append(token)
    steps.append(np.asarray(logits[0]))
  assert int(cache.index) == 140
  full = np.asarray(_full(graphdef, params, jnp.array([seq]))[0])
  for i, logits in enumerate(steps):
    np.testing.assert_allclose(logits, full[60 + i], atol=1e-5, rtol=0, err_msg=f"slot {60 + i}")
