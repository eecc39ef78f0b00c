"""Qwen3-MoE sparse MLP: a softmax top-k router and SwiGLU experts run as grouped matmuls.

The router is a linear map to ``E`` experts; its softmax (float32) gives each token's expert
probabilities, of which the top ``k`` are kept (renormalised to sum to 1 when
``cfg.norm_topk_prob``). The ``M * k`` (token, expert) assignments are sorted by expert, so each
expert's rows are contiguous, and the expert weights are applied with ``jax.lax.ragged_dot``
(one grouped matmul per projection, no per-expert loop and no capacity / dropped tokens); the
outputs are weighted by the router probabilities and summed back onto their tokens.

:func:`load_balancing_loss` is transformers' ``load_balancing_loss_func`` (Switch Transformer
eqs. 4-6) on the router logits the forward collects (``Transformer.router_logits``).

Symbols: M tokens (B*T), E experts, k experts per token, D embed_dim, F moe_mlp_dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from spade_jax import sharding
from spade_jax.models.config import TransformerConfig

F32 = jnp.float32


def route(cfg: TransformerConfig, router_logits_ME):
  """``(weights_Mk, experts_Mk)``: the top-k experts of each token and their weights."""
  probs_ME = jax.nn.softmax(router_logits_ME.astype(F32), axis=-1)
  weights_Mk, experts_Mk = jax.lax.top_k(probs_ME, cfg.num_experts_per_tok)
  if cfg.norm_topk_prob:
    weights_Mk = weights_Mk / jnp.sum(weights_Mk, axis=-1, keepdims=True)
  return weights_Mk, experts_Mk


def sparse_mlp(cfg: TransformerConfig, w: dict, h_BTD) -> tuple[jax.Array, jax.Array]:
  """The MoE MLP on the normed residual ``h_BTD`` with one layer's weights ``w`` (``router``
  ``[D, E]``, ``moe_gate`` / ``moe_up`` ``[E, D, F]``, ``moe_down`` ``[E, F, D]``). Returns the
  output ``[B, T, D]`` (float32) and the router logits ``[B, T, E]`` (float32)."""
  dt = cfg.dtype
  B, T, D = h_BTD.shape
  E, k = cfg.num_experts, cfg.num_experts_per_tok
  h_MD = h_BTD.reshape(B * T, D)
  logits_ME = jnp.einsum(
    "md,de->me", h_MD.astype(dt), w["router"].astype(dt), preferred_element_type=F32
  )
  weights_Mk, experts_Mk = route(cfg, logits_ME)
  experts_A = experts_Mk.reshape(-1)  # A = M * k assignments, token-major
  order_A = jnp.argsort(experts_A, stable=True)
  token_A = order_A // k
  group_sizes_E = jnp.bincount(experts_A, length=E).astype(jnp.int32)
  x_AD = jnp.take(h_MD, token_A, axis=0).astype(dt)

  def grouped(x, w_EIO):
    return jax.lax.ragged_dot(x, w_EIO.astype(dt), group_sizes_E, preferred_element_type=F32)

  act_AF = jax.nn.silu(grouped(x_AD, w["moe_gate"])) * grouped(x_AD, w["moe_up"])
  y_AD = grouped(act_AF.astype(dt), w["moe_down"])
  y_AD = y_AD * weights_Mk.reshape(-1)[order_A][:, None]
  out_MD = jnp.zeros((B * T, D), F32).at[token_A].add(y_AD)
  out_BTD = sharding.constrain(out_MD.reshape(B, T, D), ("batch", "length", "act_embed"))
  return out_BTD, logits_ME.reshape(B, T, E)


def load_balancing_loss(cfg: TransformerConfig, router_logits_LBTE, mask_BT=None) -> jax.Array:
  """transformers' ``load_balancing_loss_func`` over the sparse layers' router logits
  ``[L, B, T, E]`` (all ``L`` layers as the forward returns them; dense layers are skipped):
  ``E * sum_e f_e * P_e``, with ``f_e`` the fraction of top-k assignments to expert ``e`` and
  ``P_e`` its mean router probability, both over every (sparse layer, valid token) row.
  ``mask_BT`` (default all valid) excludes padding, as transformers' ``attention_mask``.
  Multiply by ``cfg.router_aux_loss_coef`` to add it to a training loss."""
  L, B, T, E = router_logits_LBTE.shape
  layer_L = jnp.asarray(cfg.sparse_layers, F32)
  mask = jnp.ones((B, T), F32) if mask_BT is None else jnp.asarray(mask_BT, F32)
  row_LBT = layer_L[:, None, None] * mask[None]
  probs = jax.nn.softmax(router_logits_LBTE.astype(F32), axis=-1)
  _, experts_LBTk = jax.lax.top_k(probs, cfg.num_experts_per_tok)
  # the assignment counts by a scatter-add (a one-hot [L, B, T, k, E] would be gigabytes at
  # Qwen3-30B-A3B's 128 experts, top-8); they carry no gradient, as in transformers
  row_LBTk = jnp.broadcast_to(row_LBT[..., None], experts_LBTk.shape)
  counts_E = jnp.zeros((E,), F32).at[experts_LBTk.reshape(-1)].add(row_LBTk.reshape(-1))
  prob_sum_E = jnp.einsum("lbte,lbt->e", probs, row_LBT)
  rows = jnp.maximum(jnp.sum(row_LBT), 1.0)  # no valid row (a pad micro-batch): 0, not NaN
  return E * jnp.sum((counts_E / rows) * (prob_sum_E / rows))
