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
once per loop (:func:`prepare_weights`) rather than once per step. The math is the
transformer block's (same helpers, same order of operations); ``tests/test_kv_cache.py``
holds it equal to the model's full forward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax import sharding
from spade_jax.models.cache import KVCache
from spade_jax.models.config import TransformerConfig
from spade_jax.models.transformer import _MASK_VALUE, _dense, apply_rope, rms_norm, rope_tables

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
  """Slices the stacked block parameters per layer. Call it once outside a decode loop."""
  cfg = model.cfg
  stacked = model.blocks.weights(cfg)
  layers = tuple({name: w[i] for name, w in stacked.items()} for i in range(cfg.num_layers))
  return DecodeWeights(
    embed_VD=model.embed[...],
    layers=layers,
    final_norm_D=model.final_norm[...],
    unembed_DV=model.unembed_matrix(),
  )


def _attend(cfg: TransformerConfig, q_B1NH, k_BKHS, v_BKSH, valid_BS):
  B, _, N, H = q_B1NH.shape
  K = cfg.num_kv_heads
  dt = cfg.dtype
  q_BKGH = q_B1NH[:, 0].reshape(B, K, N // K, H)
  scores_BKGS = jnp.einsum(
    "bkgh,bkhs->bkgs", q_BKGH.astype(dt), k_BKHS.astype(dt), preferred_element_type=_F32
  ) * (H**-0.5)
  scores_BKGS = jnp.where(valid_BS[:, None, None, :], scores_BKGS, _MASK_VALUE)
  probs_BKGS = jax.nn.softmax(scores_BKGS, axis=-1)
  out_BKGH = jnp.einsum(
    "bkgs,bksh->bkgh", probs_BKGS.astype(dt), v_BKSH.astype(dt), preferred_element_type=_F32
  )
  return out_BKGH.reshape(B, 1, N, H)


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
  sin_B1H, cos_B1H = rope_tables(position_B[:, None], cfg.head_dim, cfg.rope_theta)
  valid_BS = jax.lax.dynamic_update_slice(cache.valid_BS, mask_B[:, None], (zero, index))
  ks, vs = list(cache.k), list(cache.v)
  for i, w in enumerate(weights.layers):
    h_B1D = rms_norm(x_B1D, w["attn_norm"], cfg.rms_eps)
    q = _dense(h_B1D, w["q"], "btd,dnh->btnh", dt)
    k = _dense(h_B1D, w["k"], "btd,dkh->btkh", dt)
    v = _dense(h_B1D, w["v"], "btd,dkh->btkh", dt)
    if cfg.qkv_bias:
      q = q + w["q_bias"].astype(_F32)
      k = k + w["k_bias"].astype(_F32)
      v = v + w["v_bias"].astype(_F32)
    if cfg.qk_norm:
      q = rms_norm(q, w["q_norm"], cfg.rms_eps)
      k = rms_norm(k, w["k_norm"], cfg.rms_eps)
    q = sharding.constrain(apply_rope(q, sin_B1H, cos_B1H), ("batch", "length", "act_heads", None))
    k = apply_rope(k, sin_B1H, cos_B1H)
    ks[i] = jax.lax.dynamic_update_slice(
      ks[i], k.transpose(0, 2, 3, 1).astype(ks[i].dtype), (zero, zero, zero, index)
    )
    vs[i] = jax.lax.dynamic_update_slice(
      vs[i], v.swapaxes(1, 2).astype(vs[i].dtype), (zero, zero, index, zero)
    )
    attn_B1NH = _attend(cfg, q, ks[i], vs[i], valid_BS)
    x_B1D = x_B1D + _dense(attn_B1NH, w["o"], "btnh,nhd->btd", dt)
    x_B1D = sharding.constrain(x_B1D, ("batch", "length", "act_embed"))
    h_B1D = rms_norm(x_B1D, w["mlp_norm"], cfg.rms_eps)
    gate = _dense(h_B1D, w["gate"], "btd,df->btf", dt)
    up = _dense(h_B1D, w["up"], "btd,df->btf", dt)
    act = sharding.constrain(jax.nn.silu(gate) * up, ("batch", "length", "act_mlp"))
    x_B1D = x_B1D + _dense(act, w["down"], "btf,fd->btd", dt)
    x_B1D = sharding.constrain(x_B1D, ("batch", "length", "act_embed"))
  h_BD = rms_norm(x_B1D[:, 0], weights.final_norm_D, cfg.rms_eps)
  logits_BV = jnp.einsum(
    "bd,dv->bv", h_BD.astype(dt), weights.unembed_DV.astype(dt), preferred_element_type=_F32
  )
  logits_BV = sharding.constrain(logits_BV, ("batch", "act_vocab"))
  new_cache = DecodeCache(k=tuple(ks), v=tuple(vs), valid_BS=valid_BS, index=index + 1)
  return logits_BV, constrain_cache(new_cache)
