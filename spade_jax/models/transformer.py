"""Decoder-only transformer (Llama / Qwen2 / Qwen3) as a Flax NNX module.

Layers are stored stacked (leading ``layers`` axis) and run with ``lax.scan``, so compile time
does not grow with depth and the KV cache is one array per K/V. Every parameter carries logical
axis names under ``sharding.LOGICAL_AXES_KEY``; activations are constrained at block boundaries.
The block itself (shared with the decode engine) is :func:`spade_jax.models.block.block`; this
module supplies its attention over the full sequence or the model's stacked KV cache.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax import sharding
from spade_jax.models.block import attention, block_with_router, rms_norm, rope_tables
from spade_jax.models.cache import KVCache
from spade_jax.models.config import TransformerConfig

_F32 = jnp.float32

# name -> (shape function of cfg, logical axes, init kind); the layer axis is prepended.
_BLOCK_PARAMS = {
  "attn_norm": (lambda c: (c.embed_dim,), ("norm",), "ones"),
  "q": (lambda c: (c.embed_dim, c.num_heads, c.head_dim), ("embed", "heads", "head_dim"), "w"),
  "k": (
    lambda c: (c.embed_dim, c.num_kv_heads, c.head_dim),
    ("embed", "kv_heads", "head_dim"),
    "w",
  ),
  "v": (
    lambda c: (c.embed_dim, c.num_kv_heads, c.head_dim),
    ("embed", "kv_heads", "head_dim"),
    "w",
  ),
  "o": (lambda c: (c.num_heads, c.head_dim, c.embed_dim), ("heads", "head_dim", "embed"), "w"),
  "mlp_norm": (lambda c: (c.embed_dim,), ("norm",), "ones"),
}
DENSE_MLP_PARAMS = {
  "gate": (lambda c: (c.embed_dim, c.mlp_dim), ("embed", "mlp"), "w"),
  "up": (lambda c: (c.embed_dim, c.mlp_dim), ("embed", "mlp"), "w"),
  "down": (lambda c: (c.mlp_dim, c.embed_dim), ("mlp", "embed"), "w"),
}
MOE_PARAMS = {
  "router": (lambda c: (c.embed_dim, c.num_experts), ("embed", None), "w"),
  "moe_gate": (
    lambda c: (c.num_experts, c.embed_dim, c.moe_mlp_dim),
    ("expert", "embed", "mlp"),
    "w",
  ),
  "moe_up": (
    lambda c: (c.num_experts, c.embed_dim, c.moe_mlp_dim),
    ("expert", "embed", "mlp"),
    "w",
  ),
  "moe_down": (
    lambda c: (c.num_experts, c.moe_mlp_dim, c.embed_dim),
    ("expert", "mlp", "embed"),
    "w",
  ),
}
_BIAS_PARAMS = {
  "q_bias": (lambda c: (c.num_heads, c.head_dim), ("heads", "head_dim"), "zeros"),
  "k_bias": (lambda c: (c.num_kv_heads, c.head_dim), ("kv_heads", "head_dim"), "zeros"),
  "v_bias": (lambda c: (c.num_kv_heads, c.head_dim), ("kv_heads", "head_dim"), "zeros"),
}
_QK_NORM_PARAMS = {
  "q_norm": (lambda c: (c.head_dim,), ("norm",), "ones"),
  "k_norm": (lambda c: (c.head_dim,), ("norm",), "ones"),
}


def block_param_specs(cfg: TransformerConfig) -> dict:
  """The per-layer parameter table for ``cfg`` (names, shapes, logical axes, init)."""
  specs = dict(_BLOCK_PARAMS)
  if not all(cfg.sparse_layers):
    specs.update(DENSE_MLP_PARAMS)
  if any(cfg.sparse_layers):
    specs.update(MOE_PARAMS)
  if cfg.qkv_bias:
    specs.update(_BIAS_PARAMS)
  if cfg.qk_norm:
    specs.update(_QK_NORM_PARAMS)
  return specs


def _param(rngs: nnx.Rngs, shape, axes, kind, dtype, std=0.02) -> nnx.Param:
  if kind == "ones":
    value = jnp.ones(shape, dtype)
  elif kind == "zeros":
    value = jnp.zeros(shape, dtype)
  else:
    value = (std * jax.random.normal(rngs.params(), shape, _F32)).astype(dtype)
  return nnx.Param(value, **{sharding.LOGICAL_AXES_KEY: tuple(axes)})


class Blocks(nnx.Module):
  """All transformer blocks, parameters stacked along a leading ``layers`` axis."""

  def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
    for name, (shape_fn, axes, kind) in block_param_specs(cfg).items():
      shape = (cfg.num_layers, *shape_fn(cfg))
      setattr(self, name, _param(rngs, shape, ("layers", *axes), kind, cfg.param_dtype))

  def weights(self, cfg: TransformerConfig) -> dict[str, jax.Array]:
    """The stacked per-layer weights; when dense and sparse MLP layers are mixed, also
    ``"sparse"`` ``[L]`` (bool), which :func:`spade_jax.models.block.block` switches on."""
    out = {name: getattr(self, name)[...] for name in block_param_specs(cfg)}
    if len(set(cfg.sparse_layers)) > 1:
      out["sparse"] = jnp.asarray(cfg.sparse_layers)
    return out


class Transformer(nnx.Module):
  """``model(tokens_BT)`` -> float32 logits ``[B, T, V]``.

  With ``cache=`` the new tokens are written into the KV cache at ``cache.index`` and the call
  returns ``(logits, new_cache)``; ``positions_BT`` then gives each token's RoPE position and
  ``mask_BT`` marks which of the new tokens are real (invalid ones are never attended to).
  """

  def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.embed = _param(
      rngs, (cfg.vocab_size, cfg.embed_dim), ("vocab", "embed"), "w", cfg.param_dtype
    )
    self.blocks = Blocks(cfg, rngs=rngs)
    self.final_norm = _param(rngs, (cfg.embed_dim,), ("norm",), "ones", cfg.param_dtype)
    if not cfg.tie_embeddings:
      self.lm_head = _param(
        rngs, (cfg.embed_dim, cfg.vocab_size), ("embed", "vocab"), "w", cfg.param_dtype
      )

  def __call__(self, tokens_BT, positions_BT=None, *, cache: KVCache | None = None, mask_BT=None):
    hidden_BTD, new_cache = self.hidden(tokens_BT, positions_BT, cache=cache, mask_BT=mask_BT)
    logits_BTV = self.logits(hidden_BTD)
    return logits_BTV if cache is None else (logits_BTV, new_cache)

  def hidden(self, tokens_BT, positions_BT=None, *, cache: KVCache | None = None, mask_BT=None):
    """Final-norm hidden states ``[B, T, D]`` (float32) and the updated cache (or None)."""
    hidden_BTD, new_cache, _ = self.hidden_and_router(
      tokens_BT, positions_BT, cache=cache, mask_BT=mask_BT
    )
    return hidden_BTD, new_cache

  def router_logits(self, tokens_BT, positions_BT=None, *, mask_BT=None):
    """``(logits [B, T, V], router logits [L, B, T, E])`` of an MoE model's full forward
    (dense layers' router logits are zeros). The load-balancing loss is
    ``moe.load_balancing_loss(cfg, router_LBTE, mask_BT) * cfg.router_aux_loss_coef``."""
    hidden_BTD, _, router_LBTE = self.hidden_and_router(tokens_BT, positions_BT, mask_BT=mask_BT)
    return self.logits(hidden_BTD), router_LBTE

  def hidden_and_router(
    self, tokens_BT, positions_BT=None, *, cache: KVCache | None = None, mask_BT=None
  ):
    """:meth:`hidden` plus the stacked router logits ``[L, B, T, E]`` (None for a dense
    model)."""
    cfg = self.cfg
    tokens_BT = jnp.asarray(tokens_BT, jnp.int32)
    B, T = tokens_BT.shape
    if positions_BT is None:
      start = 0 if cache is None else cache.index
      positions_BT = jnp.broadcast_to(start + jnp.arange(T, dtype=jnp.int32), (B, T))
    causal = cache is None and mask_BT is None  # exactly causal: cuDNN may skip half
    if mask_BT is None:
      mask_BT = jnp.ones((B, T), bool)
    x_BTD = jnp.take(self.embed[...], tokens_BT, axis=0).astype(_F32)
    x_BTD = sharding.constrain(x_BTD, ("batch", "length", "act_embed"))
    sin_BTH, cos_BTH = rope_tables(cfg, positions_BT, mask_BT)

    if cache is None:
      causal_TT = jnp.tril(jnp.ones((T, T), bool))
      attn_mask_BTS = causal_TT[None] & mask_BT[:, None, :]
      kv_xs = None
    else:
      valid_BS = jax.lax.dynamic_update_slice(cache.valid_BS, mask_BT, (0, cache.index))
      slot_S = jnp.arange(cache.size)
      visible_TS = slot_S[None, :] <= (cache.index + jnp.arange(T))[:, None]
      attn_mask_BTS = visible_TS[None] & valid_BS[:, None, :]
      kv_xs = (cache.k_LBSKH, cache.v_LBSKH)

    def body(x_BTD, xs):
      w, kv = xs
      index = None if cache is None else cache.index
      attend = _model_attend(cfg, attn_mask_BTS, kv, index, causal)
      x_BTD, kv, router_BTE = block_with_router(cfg, w, x_BTD, sin_BTH, cos_BTH, attend)
      return x_BTD, (kv, router_BTE)

    if cfg.remat == "full":
      body = jax.checkpoint(body)
    elif cfg.remat == "dots":
      body = jax.checkpoint(body, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)

    x_BTD, (new_kv, router_LBTE) = jax.lax.scan(body, x_BTD, (self.blocks.weights(cfg), kv_xs))
    hidden_BTD = rms_norm(x_BTD, self.final_norm[...], cfg.rms_eps)
    if cache is None:
      return hidden_BTD, None, router_LBTE
    new_cache = KVCache(
      k_LBSKH=new_kv[0], v_LBSKH=new_kv[1], valid_BS=valid_BS, index=cache.index + T
    )
    return hidden_BTD, new_cache, router_LBTE

  def unembed_matrix(self) -> jax.Array:
    """``[D, V]`` output projection (the transposed embedding when tied)."""
    return self.embed[...].T if self.cfg.tie_embeddings else self.lm_head[...]

  def logits(self, hidden_BTD) -> jax.Array:
    w_DV = self.unembed_matrix().astype(self.cfg.dtype)
    logits_BTV = jnp.einsum(
      "btd,dv->btv", hidden_BTD.astype(self.cfg.dtype), w_DV, preferred_element_type=_F32
    )
    return sharding.constrain(logits_BTV, ("batch", "length", "act_vocab"))


def _model_attend(cfg, mask_BTS, kv, index, causal=False):
  """The block's ``attend`` for the model forward: over this call's own keys/values (``kv``
  None) or this layer's stacked-layout cache ``kv = (K, V)`` ``[B, S, K, H]``, written at
  ``index``; ``aux`` is the new (K, V) or None. Attention is
  :func:`spade_jax.models.block.attention` (``cfg.attention_impl``); ``causal``: ``mask_BTS``
  is plain causal (no padding, no cache)."""

  def attend(q_BTNH, k_BTKH, v_BTKH):
    if kv is None:
      keys_BSKH, values_BSKH, new_kv = k_BTKH, v_BTKH, None
    else:
      k_cache, v_cache = kv
      zero = jnp.zeros((), jnp.int32)
      start = (zero, index, zero, zero)
      k_cache = jax.lax.dynamic_update_slice(k_cache, k_BTKH.astype(k_cache.dtype), start)
      v_cache = jax.lax.dynamic_update_slice(v_cache, v_BTKH.astype(v_cache.dtype), start)
      keys_BSKH, values_BSKH, new_kv = k_cache, v_cache, (k_cache, v_cache)
    attn_BTNH = attention(cfg, q_BTNH, keys_BSKH, values_BSKH, mask_BTS, causal=causal)
    return attn_BTNH, new_kv

  return attend
