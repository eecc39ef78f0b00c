"""The transformer block and the helpers every forward shares.

:func:`block` is the one pre-norm block (q/k/v projections, bias, qk-norm, RoPE, attention,
output projection, SwiGLU MLP or Qwen3-MoE sparse MLP, residuals) run by the training/prefill forward
(:class:`spade_jax.models.Transformer`), the decode step
(:func:`spade_jax.engine.kv_cache.decode_forward`) and the chunked forward
(:func:`spade_jax.engine.chunk.chunk_forward`). What differs between them -- where the new
keys/values are cached and in which layout they are attended to -- is the ``attend`` callable the
caller passes; each builds it on :func:`masked_attention`.

Matmuls run in ``cfg.dtype`` and accumulate in float32; norms, softmax and the residual stream
are float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from spade_jax import sharding
from spade_jax.models import moe, rope
from spade_jax.models.config import TransformerConfig

MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
F32 = jnp.float32

# attend(q_BTNH, k_BTKH, v_BTKH) -> (attn_BTNH, aux): caches the new keys/values however the
# caller keeps them and attends the queries to them; ``aux`` (e.g. the updated cache) is
# returned by `block` unchanged.
Attend = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]


def rms_norm(x, weight, eps):
  x32 = x.astype(F32)
  normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return normed * weight.astype(F32)


def rope_tables(cfg: TransformerConfig, positions_BT, mask_BT=None):
  """sin/cos ``[B, T, H]`` in the HF (rotate-half) layout for ``cfg``'s RoPE (scaled as
  ``cfg.rope_scaling`` says), times its attention scaling. ``mask_BT`` marks the valid tokens
  (default all); only ``dynamic`` scaling reads it (:mod:`spade_jax.models.rope`)."""
  positions_BT = jnp.asarray(positions_BT)
  inv_freq, scale = rope.inv_freq(
    cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, cfg.max_position, positions_BT, mask_BT
  )
  freqs_BTh = positions_BT.astype(F32)[..., None] * inv_freq
  emb_BTH = jnp.concatenate([freqs_BTh, freqs_BTh], axis=-1)
  sin_BTH, cos_BTH = jnp.sin(emb_BTH), jnp.cos(emb_BTH)
  if scale != 1.0:
    sin_BTH, cos_BTH = sin_BTH * scale, cos_BTH * scale
  return sin_BTH, cos_BTH


def apply_rope(x_BTNH, sin_BTH, cos_BTH):
  half = x_BTNH.shape[-1] // 2
  rot = jnp.concatenate([-x_BTNH[..., half:], x_BTNH[..., :half]], axis=-1)
  return x_BTNH * cos_BTH[:, :, None, :] + rot * sin_BTH[:, :, None, :]


def dense(x, w, spec, dtype):
  """``einsum(spec, x, w)`` with both operands in ``dtype``, accumulated in float32."""
  return jnp.einsum(spec, x.astype(dtype), w.astype(dtype), preferred_element_type=F32)


def masked_attention(q, k, v, mask, dt, scores_spec: str, out_spec: str):
  """Softmax attention in whatever layout the specs name: ``scores = einsum(scores_spec, q, k)
  * H**-0.5`` (``H = q.shape[-1]``), ``MASK_VALUE`` where ``mask`` (broadcast against the
  scores) is False, softmax over the last (key) axis, then ``einsum(out_spec, probs, v)``.
  Operands in ``dt``, accumulated in float32."""
  H = q.shape[-1]
  scores = jnp.einsum(scores_spec, q.astype(dt), k.astype(dt), preferred_element_type=F32) * (
    H**-0.5
  )
  scores = jnp.where(mask, scores, MASK_VALUE)
  probs = jax.nn.softmax(scores, axis=-1)
  return jnp.einsum(out_spec, probs.astype(dt), v.astype(dt), preferred_element_type=F32)


def block(
  cfg: TransformerConfig, w: dict, x_BTD, sin_BTH, cos_BTH, attend: Attend
) -> tuple[jax.Array, Any]:
  """One pre-norm block on the residual stream ``x_BTD`` (float32) with this layer's weights
  ``w``; ``attend`` caches and attends the RoPE'd keys/values (see :data:`Attend`). Returns the
  new residual stream and ``attend``'s ``aux``."""
  x_BTD, aux, _ = block_with_router(cfg, w, x_BTD, sin_BTH, cos_BTH, attend)
  return x_BTD, aux


def dense_mlp(cfg: TransformerConfig, w: dict, h_BTD) -> jax.Array:
  """The SwiGLU MLP on the normed residual ``h_BTD``."""
  dt = cfg.dtype
  gate_BTF = dense(h_BTD, w["gate"], "btd,df->btf", dt)
  up_BTF = dense(h_BTD, w["up"], "btd,df->btf", dt)
  act_BTF = sharding.constrain(jax.nn.silu(gate_BTF) * up_BTF, ("batch", "length", "act_mlp"))
  return dense(act_BTF, w["down"], "btf,fd->btd", dt)


def mlp(cfg: TransformerConfig, w: dict, h_BTD) -> tuple[jax.Array, jax.Array | None]:
  """This layer's MLP output and router logits ``[B, T, E]`` (None for a dense model): dense,
  sparse (:func:`spade_jax.models.moe.sparse_mlp`), or -- when the model mixes both -- chosen
  by ``w["sparse"]`` with ``lax.cond`` (a dense layer then returns zero router logits)."""
  if not cfg.num_experts:
    return dense_mlp(cfg, w, h_BTD), None
  if "sparse" not in w:  # every layer is sparse
    return moe.sparse_mlp(cfg, w, h_BTD)

  def dense_branch(h):
    return dense_mlp(cfg, w, h), jnp.zeros((*h.shape[:-1], cfg.num_experts), F32)

  return jax.lax.cond(w["sparse"], lambda h: moe.sparse_mlp(cfg, w, h), dense_branch, h_BTD)


def block_with_router(
  cfg: TransformerConfig, w: dict, x_BTD, sin_BTH, cos_BTH, attend: Attend
) -> tuple[jax.Array, Any, jax.Array | None]:
  """:func:`block`, plus this layer's router logits ``[B, T, E]`` (None for a dense model)."""
  dt = cfg.dtype
  h_BTD = rms_norm(x_BTD, w["attn_norm"], cfg.rms_eps)
  q_BTNH = dense(h_BTD, w["q"], "btd,dnh->btnh", dt)
  k_BTKH = dense(h_BTD, w["k"], "btd,dkh->btkh", dt)
  v_BTKH = dense(h_BTD, w["v"], "btd,dkh->btkh", dt)
  if cfg.qkv_bias:
    q_BTNH = q_BTNH + w["q_bias"].astype(F32)
    k_BTKH = k_BTKH + w["k_bias"].astype(F32)
    v_BTKH = v_BTKH + w["v_bias"].astype(F32)
  if cfg.qk_norm:
    q_BTNH = rms_norm(q_BTNH, w["q_norm"], cfg.rms_eps)
    k_BTKH = rms_norm(k_BTKH, w["k_norm"], cfg.rms_eps)
  q_BTNH = apply_rope(q_BTNH, sin_BTH, cos_BTH)
  k_BTKH = apply_rope(k_BTKH, sin_BTH, cos_BTH)
  q_BTNH = sharding.constrain(q_BTNH, ("batch", "length", "act_heads", None))

  attn_BTNH, aux = attend(q_BTNH, k_BTKH, v_BTKH)
  x_BTD = x_BTD + dense(attn_BTNH, w["o"], "btnh,nhd->btd", dt)
  x_BTD = sharding.constrain(x_BTD, ("batch", "length", "act_embed"))

  h_BTD = rms_norm(x_BTD, w["mlp_norm"], cfg.rms_eps)
  mlp_BTD, router_BTE = mlp(cfg, w, h_BTD)
  x_BTD = sharding.constrain(x_BTD + mlp_BTD, ("batch", "length", "act_embed"))
  return x_BTD, aux, router_BTE
