"""Decode-time KV cache and the single-token forward pass the decode loop runs every step.

The model's own cache (:class:`spade_jax.models.KVCache`, stacked ``[L, B, S, K, H]``, read
by ``Transformer.hidden`` inside a ``lax.scan`` over layers) is what prefill writes. For the
decode loop that layout is slow: scanning over layers slices every layer's cache out of the
stack and writes it back (several full copies of the cache per token), and the ``[S, K, H]``
order makes both attention matmuls strided. On CPU (tiny benchmark config, batch 64, 256
slots) the decode loop ran 3-4x faster after switching to the layout below. So after prefill
the cache is converted once into :class:`DecodeCache`: one array per layer, keys
``[B, K, H, S]`` and values ``[B, K, S, H]`` (so ``q.k`` and ``p.v`` are plain batched
matmuls; XLA:CPU ran the ``[.., S, H]`` key form 5-10x slower in float32), updated in place
by ``dynamic_update_slice`` in a layer loop unrolled at trace time (so compile time grows with
depth: ~10-20 s for SmolLM2's 30 layers on 2 CPU cores), with the per-layer weights sliced
once per loop (:func:`prepare_weights`) rather than once per step. Each layer is the model's
own :func:`spade_jax.models.block.block`; only its ``attend`` differs (:func:`decode_attend`,
and :func:`chunk_attend` for the chunked forward, both over this layout);
``tests/test_kv_cache.py`` holds it equal to the model's full forward. On the CPU backend the
one-token step forms both products as broadcast-multiply + sum (:func:`one_query_attention`):
the same sums, faster than XLA:CPU's batched ``[G, H] x [H, S]`` dots at batch 64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax import sharding
from spade_jax.models.block import MASK_VALUE, block, masked_attention, rms_norm, rope_tables
from spade_jax.models.cache import KVCache
from spade_jax.models.config import TransformerConfig

_F32 = jnp.float32
KEY_AXES = ("batch", "act_kv_heads", None, "cache_length")
VALUE_AXES = ("batch", "act_kv_heads", "cache_length", None)


@struct.dataclass
class DecodeCache:
  """Per-layer keys ``[B, K, H, S]`` and values ``[B, K, S, H]``, per-sequence slot validity,
  and the shared write index."""

  k: tuple  # of num_layers arrays [B, K, H, S]
  v: tuple  # of num_layers arrays [B, K, S, H]
  valid_BS: jax.Array  # bool: slot holds a real token of this sequence
  index: jax.Array  # int32 scalar: next slot to write

  @property
  def size(self) -> int:
    return self.valid_BS.shape[1]

  @property
  def batch(self) -> int:
    return self.valid_BS.shape[0]


def constrain_cache(cache: DecodeCache) -> DecodeCache:
  """Batch over data/fsdp, kv heads over tensor (a no-op without a mesh)."""
  k = tuple(sharding.constrain(a, KEY_AXES) for a in cache.k)
  v = tuple(sharding.constrain(a, VALUE_AXES) for a in cache.v)
  return cache.replace(k=k, v=v, valid_BS=sharding.constrain(cache.valid_BS, ("batch", None)))


def from_model_cache(cache: KVCache) -> DecodeCache:
  """Converts the model's stacked cache (one copy; done once after prefill)."""
  L = cache.k_LBSKH.shape[0]
  k = tuple(cache.k_LBSKH[i].transpose(0, 2, 3, 1) for i in range(L))
  v = tuple(cache.v_LBSKH[i].swapaxes(1, 2) for i in range(L))
  return constrain_cache(DecodeCache(k=k, v=v, valid_BS=cache.valid_BS, index=cache.index))


def to_model_cache(cache: DecodeCache) -> KVCache:
  """The same contents in the model's stacked ``[L, B, S, K, H]`` layout."""
  return KVCache(
    k_LBSKH=jnp.stack([a.transpose(0, 3, 1, 2) for a in cache.k]),
    v_LBSKH=jnp.stack([a.swapaxes(1, 2) for a in cache.v]),
    valid_BS=cache.valid_BS,
    index=cache.index,
  )


@struct.dataclass
class DecodeWeights:
  """The model's parameters regrouped for the unrolled decode forward."""

  embed_VD: jax.Array
  layers: tuple  # of per-layer dicts name -> array (the stacked block params, sliced)
  final_norm_D: jax.Array
  unembed_DV: jax.Array


def prepare_weights(model) -> DecodeWeights:
  """Slices the stacked block parameters per layer. Call it once outside a decode loop.

  The matrices (every block weight of two or more axes, and the unembedding) are cast to the
  compute dtype here, once per loop rather than at every use (`block.dense`, the router, the
  experts' `ragged_dot` and `Transformer.logits` cast them to it anyway, so the values are the
  same). Norm scales, biases and the embedding table (looked up, not multiplied) keep their
  dtype. On an FSDP mesh the CPU compiler still all-gathers the float32 weights and converts
  after (BUILD_NOTES, "Compiled memory plans")."""
  cfg = model.cfg
  dt = jnp.dtype(cfg.dtype)
  stacked = model.blocks.weights(cfg)
  matrix = {n for n, w in stacked.items() if w.ndim >= 3 and jnp.issubdtype(w.dtype, jnp.floating)}
  stacked = {n: w.astype(dt) if n in matrix else w for n, w in stacked.items()}  # [L, ...] each
  layers = tuple({name: w[i] for name, w in stacked.items()} for i in range(cfg.num_layers))
  return DecodeWeights(
    embed_VD=model.embed[...],
    layers=layers,
    final_norm_D=model.final_norm[...],
    unembed_DV=model.unembed_matrix().astype(dt),
  )


def write_kv(k_BKHS, v_BKSH, k_BTKH, v_BTKH, index):
  """One layer's decode cache with ``T`` new keys/values written at slots ``[index, index+T)``."""
  zero = jnp.zeros((), jnp.int32)
  k_BKHS = jax.lax.dynamic_update_slice(
    k_BKHS, k_BTKH.transpose(0, 2, 3, 1).astype(k_BKHS.dtype), (zero, zero, zero, index)
  )
  v_BKSH = jax.lax.dynamic_update_slice(
    v_BKSH, v_BTKH.swapaxes(1, 2).astype(v_BKSH.dtype), (zero, zero, index, zero)
  )
  return k_BKHS, v_BKSH


def one_query_attention(q_BKGH, k_BKHS, v_BKSH, mask, dt):
  """`masked_attention` of one query per sequence, as broadcast-multiply + sum instead of the
  batched ``[G, H] x [H, S]`` dots: the same float32 sums (bit-identical outputs on XLA:CPU),
  2-17 % more decode tokens/s at batch 64 on the 2-core CPU in two A/B runs (issue 26,
  BUILD_NOTES; benchmarks/decode_attention.py times one layer's)."""
  H = q_BKGH.shape[-1]
  q = q_BKGH.astype(dt).astype(jnp.float32)
  scores_BKGS = jnp.sum(q[..., None] * k_BKHS.astype(dt).astype(jnp.float32)[:, :, None], axis=-2)
  scores_BKGS = jnp.where(mask, scores_BKGS * H**-0.5, MASK_VALUE)
  probs_BKGS = jax.nn.softmax(scores_BKGS, axis=-1).astype(dt).astype(jnp.float32)
  v = v_BKSH.astype(dt).astype(jnp.float32)
  return jnp.sum(probs_BKGS[..., None] * v[:, :, None], axis=-2)


def decode_attend(cfg: TransformerConfig, k_BKHS, v_BKSH, valid_BS, index):
  """The block's ``attend`` for one token per sequence: writes it into this layer's cache at
  ``index`` and attends to the slots where ``valid_BS`` (which already counts it);
  ``aux`` is the layer's new ``(K, V)``."""

  def attend(q_B1NH, k_B1KH, v_B1KH):
    k, v = write_kv(k_BKHS, v_BKSH, k_B1KH, v_B1KH, index)
    B, _, N, H = q_B1NH.shape
    K = cfg.num_kv_heads
    q_BKGH = q_B1NH[:, 0].reshape(B, K, N // K, H)
    mask = valid_BS[:, None, None, :]
    if jax.default_backend() == "cpu":
      out_BKGH = one_query_attention(q_BKGH, k, v, mask, cfg.dtype)
    else:  # accelerators: the dots (tensor cores / MXU take the [G, H] x [H, S] products)
      spec = ("bkgh,bkhs->bkgs", "bkgs,bksh->bkgh")
      out_BKGH = masked_attention(q_BKGH, k, v, mask, cfg.dtype, *spec)
    return out_BKGH.reshape(B, 1, N, H), (k, v)

  return attend


def chunk_attend(cfg: TransformerConfig, k_BKHS, v_BKSH, mask_BCS, index):
  """The block's ``attend`` for ``C`` tokens per sequence: writes them into this layer's cache
  at ``[index, index + C)`` and attends token ``c`` to the slots where ``mask_BCS[:, c]``;
  ``aux`` is the layer's new ``(K, V)``."""

  def attend(q_BCNH, k_BCKH, v_BCKH):
    k, v = write_kv(k_BKHS, v_BKSH, k_BCKH, v_BCKH, index)
    B, C, N, H = q_BCNH.shape
    K = cfg.num_kv_heads
    q_BKGCH = q_BCNH.reshape(B, C, K, N // K, H).transpose(0, 2, 3, 1, 4)
    out_BKGCH = masked_attention(
      q_BKGCH, k, v, mask_BCS[:, None, None], cfg.dtype, "bkgch,bkhs->bkgcs", "bkgcs,bksh->bkgch"
    )
    return out_BKGCH.transpose(0, 3, 1, 2, 4).reshape(B, C, N, H), (k, v)

  return attend


def decode_forward(
  cfg: TransformerConfig, weights: DecodeWeights, token_B, position_B, cache: DecodeCache, mask_B
) -> tuple[jax.Array, DecodeCache]:
  """Runs one token per sequence at slot ``cache.index``; returns float32 logits ``[B, V]``
  and the cache with the token's K/V written (``mask_B`` False: written but never visible)."""
  dt = cfg.dtype
  index = cache.index
  zero = jnp.zeros((), jnp.int32)
  x_B1D = jnp.take(weights.embed_VD, token_B[:, None].astype(jnp.int32), axis=0).astype(_F32)
  x_B1D = sharding.constrain(x_B1D, ("batch", "length", "act_embed"))
  sin_B1H, cos_B1H = rope_tables(cfg, position_B[:, None], mask_B[:, None])
  valid_BS = jax.lax.dynamic_update_slice(cache.valid_BS, mask_B[:, None], (zero, index))
  ks, vs = list(cache.k), list(cache.v)
  for i, w in enumerate(weights.layers):
    attend = decode_attend(cfg, ks[i], vs[i], valid_BS, index)
    x_B1D, (ks[i], vs[i]) = block(cfg, w, x_B1D, sin_B1H, cos_B1H, attend)
  h_BD = rms_norm(x_B1D[:, 0], weights.final_norm_D, cfg.rms_eps)
  logits_BV = jnp.einsum(
    "bd,dv->bv", h_BD.astype(dt), weights.unembed_DV.astype(dt), preferred_element_type=_F32
  )
  logits_BV = sharding.constrain(logits_BV, ("batch", "act_vocab"))
  new_cache = DecodeCache(k=tuple(ks), v=tuple(vs), valid_BS=valid_BS, index=index + 1)
  return logits_BV, constrain_cache(new_cache)
