"""GRPO / PPO policy loss with truncated importance sampling, KL and entropy terms, and the
chunked log-softmax that computes token log-probs without a full ``[B, T, V]`` float32 tensor.

Symbols: B batch, T length, D embed, V vocab, C chunk length. Per token ``t`` of sample ``b``
(only where ``mask[b, t] = 1``), with ``A_b`` the sample's advantage:

* ``logp``: the trainer's current log-prob of the token (differentiated);
* ``logp_old``: the trainer's log-prob before the update (stop-gradient; with one optimizer step
  per batch, as in SPADE, it equals ``logp`` in value, so the ratio is 1 and clipping is inactive
  unless the batch is reused);
* ``logp_rollout``: the sampler's recorded log-prob (see ``spade_jax.trajectories``);
* ratio ``r = exp(logp - logp_old)``;
* PPO-clip: ``pg = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))`` (inactive in the SPADE
  update, where ``r = 1``; GSPO's sequence ratio and PPO's dual clip, which also act only when
  ``r != 1``, are therefore not offered);
* TIS weight ``w = clamp(exp(logp_old - logp_rollout), 0, tis_cap)`` (stop-gradient), ``pg *= w``:
  corrects sampler/trainer mismatch and staleness of delayed designer samples;
* KL to the reference policy, ``d = logp - logp_ref``: k1 ``d``; k2 ``d^2 / 2``; k3
  ("low_var_kl") ``exp(-d) - 1 + d`` clamped to [-10, 10] as in the reference implementation;
* loss per token ``pg + kl_coef * kl - entropy_coef * entropy``, each term reduced by the
  aggregation mode over the *global* batch (see :func:`aggregate`), so micro-batch losses sum to
  the full-batch loss and gradient accumulation is exact.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax import sharding

_F32 = jnp.float32
AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant_norm")
KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Policy-loss options; defaults are the SPADE recipe (SPADE_METHOD.md, "Update").

  eps_low, eps_high: asymmetric PPO clip range ``[1 - eps_low, 1 + eps_high]`` of the ratio.
  tis_cap:       upper clamp of the truncated importance weight; None disables TIS (w = 1).
  kl_coef:       coefficient of the KL-to-reference term; 0 means no reference forward at all.
  kl_estimator:  ``k1``, ``k2`` or ``k3`` (low-variance, clamped to [-10, 10]).
  entropy_coef:  entropy bonus coefficient (subtracted from the loss); 0 = none.
  aggregation:   ``token_mean`` (sum over all masked tokens / global masked-token count),
                 ``seq_mean_token_mean`` (per-sample token mean, summed, / global batch size
                 including pads: the SPADE/slime default), ``seq_mean_token_sum`` (per-sample
                 token sum / global batch), ``constant_norm`` (Dr.GRPO: token sum / (global
                 batch * norm_constant)).
  norm_constant: the per-sample token budget of ``constant_norm``; None = the batch length T.
  temperature:   the sampling temperature: log-probs are ``log_softmax(logits / temperature)``,
                 matching what the sampler recorded.
  logprob_chunk: sequence positions per chunk of the chunked log-softmax (memory per chunk is
                 ``B * chunk * V`` float32).
  loss_start:    a static promise that no row trains on a position before it (every loss mask is 0
                 there, e.g. a batch whose prompts all have at least this many tokens): log-probs
                 are formed only from this position on, so the prompt's logits are never
                 computed (results unchanged). 0 = no promise (all positions). A batch that
                 breaks it gets a NaN loss, so the update skips the step.
  router_aux_coef: MoE models only: coefficient of the router's load-balancing loss
                 (``models.moe.load_balancing_loss``) added by the update; 0 = not computed
                 (the reference recipe's ``--moe-aux-loss-coeff 0``). Ignored by dense models.
  """

  eps_low: float = 0.2
  eps_high: float = 0.28
  tis_cap: float | None = 2.0
  kl_coef: float = 0.0
  kl_estimator: str = "k3"
  entropy_coef: float = 0.0
  aggregation: str = "seq_mean_token_mean"
  norm_constant: int | None = None
  temperature: float = 1.0
  logprob_chunk: int = 256
  loss_start: int = 0
  router_aux_coef: float = 0.0

  def __post_init__(self):
    if self.aggregation not in AGGREGATIONS:
      raise ValueError(f"aggregation={self.aggregation!r}; expected one of {AGGREGATIONS}")
    if self.kl_estimator not in KL_ESTIMATORS:
      raise ValueError(f"kl_estimator={self.kl_estimator!r}; expected one of {KL_ESTIMATORS}")
    if self.norm_constant is not None and self.norm_constant < 1:
      raise ValueError(f"norm_constant must be >= 1 (or None), got {self.norm_constant}")
    if self.temperature <= 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature}")
    if self.logprob_chunk < 1:
      raise ValueError(f"logprob_chunk must be >= 1, got {self.logprob_chunk}")
    if self.loss_start < 0:
      raise ValueError(f"loss_start must be >= 0, got {self.loss_start}")
    if self.router_aux_coef < 0:
      raise ValueError(f"router_aux_coef must be >= 0, got {self.router_aux_coef}")


def token_logprobs(
  hidden_BTD,
  w_DV,
  tokens_BT,
  *,
  temperature: float = 1.0,
  chunk: int = 256,
  compute_dtype=_F32,
  entropy_grad: bool = False,
  start: int = 1,
):
  """Log-prob of each token given the previous ones, and the entropy of that predictive
  distribution, both ``[B, T]`` with position 0 set to 0 (it has no prediction).

  ``hidden_BTD`` are final-norm hidden states and ``w_DV`` the unembedding; logits are formed
  in ``compute_dtype`` with f32 accumulation, like ``Transformer.logits``, by
  :func:`_logprob_head` (one fused pass: log-normaliser, target logit and entropy; a hand-written
  backward). When the ``T - start`` predicted positions fit in one ``chunk`` they are done at
  once and the logits are kept for the backward pass; longer sequences go ``[B, chunk, V]`` at a
  time through a ``scan`` whose backward recomputes each chunk's logits, so neither pass holds a
  full ``[B, T, V]`` tensor. The entropy is stop-gradient unless ``entropy_grad``.

  ``start`` (static, >= 1): only positions ``t >= start`` are computed; earlier ones are 0 in
  both outputs. The update passes the first position any row trains on (``LossConfig
  .loss_start``) so the prompt's logits are never formed.
  """
  B, T, D = hidden_BTD.shape
  start = max(int(start), 1)
  if T <= start:
    zeros = jnp.zeros((B, T), _F32)
    return zeros, zeros
  n = T - start
  C = min(chunk, n)
  num_chunks = math.ceil(n / C)
  pad = num_chunks * C - n
  w_DV = w_DV.astype(compute_dtype)
  h_BND = hidden_BTD[:, start - 1 : -1].astype(compute_dtype)
  tgt_BN = tokens_BT[:, start:].astype(jnp.int32)
  head = functools.partial(_logprob_head, inv_temp=1.0 / temperature, entropy_grad=entropy_grad)
  if num_chunks == 1:
    logp_BN, ent_BN = head(h_BND, w_DV, tgt_BN, True)
  else:
    h_BND = jnp.pad(h_BND, ((0, 0), (0, pad), (0, 0)))
    tgt_BN = jnp.pad(tgt_BN, ((0, 0), (0, pad)))
    h_KBCD = h_BND.reshape(B, num_chunks, C, D).swapaxes(0, 1)
    tgt_KBC = tgt_BN.reshape(B, num_chunks, C).swapaxes(0, 1)

    def body(carry, xs):
      return carry, head(xs[0], w_DV, xs[1], False)

    _, (logp_KBC, ent_KBC) = jax.lax.scan(body, None, (h_KBCD, tgt_KBC))
    logp_BN = logp_KBC.swapaxes(0, 1).reshape(B, num_chunks * C)[:, :n]
    ent_BN = ent_KBC.swapaxes(0, 1).reshape(B, num_chunks * C)[:, :n]
  zero_BS = jnp.zeros((B, start), _F32)
  return jnp.concatenate([zero_BS, logp_BN], 1), jnp.concatenate([zero_BS, ent_BN], 1)


def _head_forward(h_BCD, w_DV, tgt_BC, inv_temp):
  """Logits ``[B, C, V]`` (float32, over the temperature) and from them the log-normaliser, the
  target's log-prob and the entropy ``[B, C]``."""
  logits_BCV = jnp.einsum("bcd,dv->bcv", h_BCD, w_DV, preferred_element_type=_F32) * inv_temp
  logits_BCV = sharding.constrain(logits_BCV, ("batch", "length", "act_vocab"))
  # One exp pass serves the log-normaliser and the entropy.
  max_BC1 = jnp.max(logits_BCV, axis=-1, keepdims=True)
  exp_BCV = jnp.exp(logits_BCV - max_BC1)
  sum_BC = jnp.sum(exp_BCV, axis=-1)
  lse_BC = max_BC1[..., 0] + jnp.log(sum_BC)
  # target logit by a masked sum, not a gather: stays local when the vocab axis is sharded
  vocab_V = jnp.arange(logits_BCV.shape[-1], dtype=jnp.int32)
  picked_BC = jnp.sum(jnp.where(vocab_V == tgt_BC[..., None], logits_BCV, 0.0), axis=-1)
  entropy_BC = lse_BC - jnp.sum(exp_BCV * logits_BCV, axis=-1) / sum_BC
  return logits_BCV, lse_BC, picked_BC - lse_BC, entropy_BC


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _logprob_head(h_BCD, w_DV, tgt_BC, keep_logits, inv_temp, entropy_grad):
  """``(log p(target), entropy)`` ``[B, C]`` of ``softmax(h @ w * inv_temp)``. Its backward is
  written out (``d logp / d z = onehot - p``, ``d H / d z = -p (z - E_p[z])``; one elementwise
  pass, then the two matmuls), from the logits kept by the forward (``keep_logits``) or
  recomputed (one more matmul, nothing ``[B, C, V]`` held between the passes)."""
  _, _, logp_BC, entropy_BC = _head_forward(h_BCD, w_DV, tgt_BC, inv_temp)
  return logp_BC, entropy_BC


def _logprob_head_fwd(h_BCD, w_DV, tgt_BC, keep_logits, inv_temp, entropy_grad):
  logits_BCV, lse_BC, logp_BC, entropy_BC = _head_forward(h_BCD, w_DV, tgt_BC, inv_temp)
  saved_logits = logits_BCV if keep_logits else None
  return (logp_BC, entropy_BC), (h_BCD, w_DV, tgt_BC, saved_logits, lse_BC, entropy_BC)


def _logprob_head_bwd(keep_logits, inv_temp, entropy_grad, res, g):
  h_BCD, w_DV, tgt_BC, logits_BCV, lse_BC, entropy_BC = res
  g_logp_BC, g_ent_BC = g
  if logits_BCV is None:
    logits_BCV = _head_forward(h_BCD, w_DV, tgt_BC, inv_temp)[0]
  p_BCV = jnp.exp(logits_BCV - lse_BC[..., None])
  vocab_V = jnp.arange(logits_BCV.shape[-1], dtype=jnp.int32)
  onehot_BCV = vocab_V == tgt_BC[..., None]
  dz_BCV = jnp.where(onehot_BCV, g_logp_BC[..., None], 0.0) - p_BCV * g_logp_BC[..., None]
  if entropy_grad:
    mean_z_BC1 = (lse_BC - entropy_BC)[..., None]  # E_p[z]
    dz_BCV = dz_BCV - g_ent_BC[..., None] * p_BCV * (logits_BCV - mean_z_BC1)
  # float32 cotangents times the operands as the forward saw them (as JAX's derived backward)
  dz_BCV = dz_BCV * inv_temp
  dh_BCD = jnp.einsum("bcv,dv->bcd", dz_BCV, w_DV.astype(_F32), preferred_element_type=_F32)
  dw_DV = jnp.einsum("bcd,bcv->dv", h_BCD.astype(_F32), dz_BCV, preferred_element_type=_F32)
  dtgt = np.zeros(tgt_BC.shape, jax.dtypes.float0)
  return dh_BCD.astype(h_BCD.dtype), dw_DV.astype(w_DV.dtype), dtgt


_logprob_head.defvjp(_logprob_head_fwd, _logprob_head_bwd)


def model_logprobs(model, tokens_BT, cfg: LossConfig, *, entropy_grad: bool = False):
  """:func:`token_logprobs` of a ``Transformer`` (one forward through ``model.hidden``), from
  position ``cfg.loss_start`` on."""
  hidden_BTD, _ = model.hidden(tokens_BT)
  return token_logprobs(
    hidden_BTD,
    model.unembed_matrix(),
    tokens_BT,
    temperature=cfg.temperature,
    chunk=cfg.logprob_chunk,
    compute_dtype=model.cfg.dtype,
    entropy_grad=entropy_grad,
    start=cfg.loss_start,
  )


def loss_start_broken(mask_BT, cfg: LossConfig) -> jax.Array:
  """Scalar bool: ``mask_BT`` trains on a position before ``cfg.loss_start`` (whose log-probs
  were not computed)."""
  if cfg.loss_start <= 1:
    return jnp.zeros((), bool)
  return jnp.any(mask_BT[:, : cfg.loss_start] > 0)


def aggregate(x_BT, mask_BT, cfg: LossConfig, *, global_batch, global_tokens):
  """Reduces a per-token quantity by ``cfg.aggregation``; the denominators are global (whole
  batch, pads counted), so summing the results over micro-batches gives the full-batch value."""
  m_BT = mask_BT.astype(_F32)
  xm_BT = jnp.where(m_BT > 0, x_BT, 0.0) * m_BT
  mode = cfg.aggregation
  if mode == "token_mean":
    return jnp.sum(xm_BT) / jnp.maximum(global_tokens, 1.0)
  if mode == "seq_mean_token_mean":
    len_B = jnp.sum(m_BT, axis=1)
    return jnp.sum(jnp.sum(xm_BT, axis=1) / jnp.maximum(len_B, 1.0)) / global_batch
  if mode == "seq_mean_token_sum":
    return jnp.sum(xm_BT) / global_batch
  norm = cfg.norm_constant if cfg.norm_constant is not None else x_BT.shape[1]
  return jnp.sum(xm_BT) / (global_batch * norm)


def kl_penalty(logp_BT, ref_logp_BT, estimator: str):
  """Per-token estimate of KL(pi || pi_ref) from samples of pi (k1 / k2 / k3)."""
  d_BT = logp_BT - ref_logp_BT
  if estimator == "k1":
    return d_BT
  if estimator == "k2":
    return 0.5 * d_BT * d_BT
  return jnp.clip(jnp.exp(-d_BT) - 1.0 + d_BT, -10.0, 10.0)


def policy_loss(
  logp_BT,
  old_logp_BT,
  rollout_logp_BT,
  advantages_B,
  mask_BT,
  cfg: LossConfig,
  *,
  global_batch,
  global_tokens,
  ref_logp_BT=None,
  entropy_BT=None,
):
  """The total loss of a (micro-)batch and a dict of *summed* statistics (token counts and
  per-token sums, to be accumulated across micro-batches and finalised by
  :func:`finalize_stats`)."""
  on_BT = mask_BT > 0
  m_BT = mask_BT.astype(_F32)
  adv_BT = advantages_B.astype(_F32)[:, None]
  old_BT = jax.lax.stop_gradient(old_logp_BT)
  ratio_BT = jnp.exp(jnp.where(on_BT, logp_BT - old_BT, 0.0))
  pg1_BT = -adv_BT * ratio_BT
  pg2_BT = -adv_BT * jnp.clip(ratio_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
  pg_BT = jnp.maximum(pg1_BT, pg2_BT)
  clipped_BT = pg2_BT > pg1_BT

  log_w_BT = jnp.where(on_BT, old_BT - rollout_logp_BT, 0.0)
  if cfg.tis_cap is not None:
    w_BT = jnp.clip(jnp.exp(log_w_BT), 0.0, cfg.tis_cap)
    tis_clipped_BT = jnp.exp(log_w_BT) > cfg.tis_cap
    pg_BT = pg_BT * w_BT
  else:
    w_BT = jnp.ones_like(log_w_BT)
    tis_clipped_BT = jnp.zeros_like(on_BT)

  agg = lambda x: aggregate(x, m_BT, cfg, global_batch=global_batch, global_tokens=global_tokens)
  pg_loss = agg(pg_BT)
  loss = pg_loss
  stats = {
    "tokens": jnp.sum(m_BT),
    "pg_loss": pg_loss,
    "clip_count": jnp.sum(m_BT * clipped_BT),
    "tis_clipped_count": jnp.sum(m_BT * tis_clipped_BT),
    "tis_weight_sum": jnp.sum(m_BT * w_BT),
    # k3 estimate of KL(rollout || trainer) on the sampled tokens: sampler/trainer mismatch.
    "rollout_kl_sum": jnp.sum(m_BT * (jnp.exp(log_w_BT) - 1.0 - log_w_BT)),
    # the trainer's negative log-likelihood of the trained tokens (a supervised-phase loss)
    "nll_sum": jnp.sum(m_BT * -jax.lax.stop_gradient(logp_BT)),
  }
  if cfg.kl_coef:
    if ref_logp_BT is None:
      raise ValueError("kl_coef > 0 needs reference log-probs")
    ref_BT = jax.lax.stop_gradient(jnp.where(on_BT, ref_logp_BT, logp_BT))
    kl_BT = kl_penalty(logp_BT, ref_BT, cfg.kl_estimator)
    kl_loss = agg(kl_BT)
    loss = loss + cfg.kl_coef * kl_loss
    stats["kl_loss"] = kl_loss
    stats["ref_kl_sum"] = jnp.sum(m_BT * jax.lax.stop_gradient(kl_BT))
  if entropy_BT is not None:
    stats["entropy_sum"] = jnp.sum(m_BT * jax.lax.stop_gradient(entropy_BT))
    if cfg.entropy_coef:
      entropy_loss = agg(entropy_BT)
      loss = loss - cfg.entropy_coef * entropy_loss
      stats["entropy_loss"] = entropy_loss
  stats["loss"] = loss
  return loss, stats


def finalize_stats(stats: dict) -> dict:
  """Slash-named metrics from summed statistics (token-weighted means over the whole batch)."""
  tokens = jnp.maximum(stats["tokens"], 1.0)
  out = {
    "train/loss": stats["loss"],
    "train/pg_loss": stats["pg_loss"],
    "train/clip_frac": stats["clip_count"] / tokens,
    "train/tis_clipped_frac": stats["tis_clipped_count"] / tokens,
    "train/tis_weight_mean": stats["tis_weight_sum"] / tokens,
    "train/approx_kl": stats["rollout_kl_sum"] / tokens,
    "train/loss_tokens": stats["tokens"],
    "train/nll": stats["nll_sum"] / tokens,
  }
  if "entropy_sum" in stats:
    out["train/entropy"] = stats["entropy_sum"] / tokens
  if "ref_kl_sum" in stats:
    out["train/ref_kl"] = stats["ref_kl_sum"] / tokens
    out["train/kl_loss"] = stats["kl_loss"]
  if "entropy_loss" in stats:
    out["train/entropy_loss"] = stats["entropy_loss"]
  return out
