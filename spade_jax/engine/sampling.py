"""Per-sequence sampling parameters, the token sampler, and the logits-processor hook.

Everything here is a pure function of arrays: the sampling parameters are per-sequence arrays
in a pytree (:class:`SamplingParams`), so changing a temperature or a top-p never recompiles.

Which distribution is sampled, and which log-prob is recorded (the trainer computes the same):

* The model's raw next-token logits ``z`` first pass through the logits processor (if any),
  which may only *mask* tokens (set them to ``-inf``): ``z' = processor.mask(state, z)``.
* Greedy sequences (``greedy`` or ``temperature == 0``) take ``argmax(z')``.
* Other sequences sample from ``softmax(z' / T)`` truncated, in this order, to the ``top_k``
  most likely tokens (``0`` = off), then to the smallest prefix (by decreasing probability of
  the top-k-renormalised distribution) whose mass reaches ``top_p`` (``1`` = off), then to the
  tokens whose probability is at least ``min_p`` times the most likely one's (``0`` = off). The
  most likely token always survives; ties are broken towards the lower token id.
* The recorded log-prob of the chosen token is ``log_softmax(z / T)[token]`` on the *raw*
  logits: after temperature, before the processor mask and before top-k / top-p / min-p
  truncation. Greedy sequences record ``log_softmax(z)[token]`` (temperature 1). This is
  exactly what a training forward pass recomputes from the same tokens, so the
  policy-gradient ratio is consistent between the sampler and the trainer.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

_F32 = jnp.float32


@struct.dataclass
class SamplingParams:
  """Per-sequence sampling parameters (all arrays of shape ``[B]``)."""

  temperature_B: jax.Array
  top_p_B: jax.Array
  top_k_B: jax.Array
  min_p_B: jax.Array
  greedy_B: jax.Array

  @classmethod
  def make(
    cls, batch: int, *, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, greedy=False
  ) -> SamplingParams:
    """Broadcasts scalars or length-``batch`` sequences; raises ValueError on bad values.

    ``temperature == 0`` means greedy.
    """

    def arr(name, value, dtype):
      a = np.asarray(value, dtype)
      if a.ndim > 1 or (a.ndim == 1 and a.shape[0] != batch):
        raise ValueError(f"{name} must be a scalar or have length {batch}, got shape {a.shape}")
      return np.broadcast_to(a, (batch,)).copy()

    t = arr("temperature", temperature, np.float32)
    p = arr("top_p", top_p, np.float32)
    k = arr("top_k", top_k, np.int64)
    m = arr("min_p", min_p, np.float32)
    g = arr("greedy", greedy, bool)
    if not np.all(np.isfinite(t)) or np.any(t < 0):
      raise ValueError(f"temperature must be finite and >= 0, got {t.tolist()}")
    if np.any(~(p > 0)) or np.any(p > 1):
      raise ValueError(f"top_p must be in (0, 1], got {p.tolist()}")
    if np.any(k < 0) or np.any(k > np.iinfo(np.int32).max):
      raise ValueError(f"top_k must be >= 0 (0 = off), got {k.tolist()}")
    if np.any(~(m >= 0)) or np.any(m > 1):
      raise ValueError(f"min_p must be in [0, 1], got {m.tolist()}")
    return cls(
      temperature_B=jnp.asarray(t),
      top_p_B=jnp.asarray(p),
      top_k_B=jnp.asarray(k.astype(np.int32)),
      min_p_B=jnp.asarray(m),
      greedy_B=jnp.asarray(g | (t == 0)),
    )


class LogitsProcessor(Protocol):
  """Constrained-decoding hook with per-sequence state (kept inside ``DecodeState``).

  Implementations must be hashable (they are static arguments of the jitted loop) and pure.
  Every leaf of the processor state must have a leading batch axis: for sequences that do not
  advance in a step the engine keeps their old state. ``mask`` may only lower logits (set
  disallowed tokens to ``-inf``) and must leave at least one token allowed per sequence.
  ``update`` sees every token that enters the sequence, sampled (``was_sampled_B``) or forced.
  """

  def init_state(self, batch: int) -> Any: ...

  def mask(self, proc_state: Any, logits_BV: jax.Array) -> jax.Array: ...

  def update(self, proc_state: Any, token_B: jax.Array, was_sampled_B: jax.Array) -> Any: ...


def token_logprobs(logits_BV, token_B, sampling: SamplingParams) -> jax.Array:
  """``log_softmax(logits / T)[token]`` with ``T = 1`` for greedy sequences (float32)."""
  temp_B = jnp.where(sampling.greedy_B, 1.0, sampling.temperature_B).astype(_F32)
  logp_BV = jax.nn.log_softmax(logits_BV.astype(_F32) / temp_B[:, None], axis=-1)
  return jnp.take_along_axis(logp_BV, token_B[:, None].astype(jnp.int32), axis=-1)[:, 0]


# Candidates taken by ``lax.top_k`` before any search over the whole vocabulary: enough for
# SPADE's top-k 20 and for a peaked distribution's top-p set.
CANDIDATES = 64


def _order_key(x_BV) -> jax.Array:
  """uint32 keys ordered as the float32 values (``-0.0`` counted as ``+0.0``)."""
  x_BV = jnp.where(x_BV == 0, jnp.zeros_like(x_BV), x_BV).astype(_F32)
  bits = jax.lax.bitcast_convert_type(x_BV, jnp.uint32)
  return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(0x80000000))


def _prefix_keep(key_BV, w_BV, budget_B) -> jax.Array:
  """Tokens whose weight *before* them is < ``budget_B``, in the order value down, id up.

  "Weight before" is the sum of ``w_BV`` over the tokens ahead in that order (a sort's
  exclusive cumulative sum), found without sorting: a bisection over the 2**32 value keys for
  the smallest key ``v`` with ``sum(w[key > v]) < budget`` (32 masked sums per row; every
  token above ``v`` is kept, every token below it dropped), then the tokens tied at ``v`` in
  id order. ``w`` = 1 and ``budget`` = k is top-k; ``w`` = probabilities and ``budget`` = p
  is top-p. ``w`` must be >= 0 and ``budget`` > 0.
  """
  zero = jnp.zeros((), w_BV.dtype)

  def mass_above(v_B):
    return jnp.sum(jnp.where(key_BV > v_B[:, None], w_BV, zero), axis=-1)

  def halve(_, lohi):
    lo_B, hi_B = lohi
    mid_B = lo_B + ((hi_B - lo_B) >> 1)
    ok_B = mass_above(mid_B) < budget_B
    return jnp.where(ok_B, lo_B, mid_B + 1), jnp.where(ok_B, mid_B, hi_B)

  lohi = (jnp.min(key_BV, axis=-1), jnp.max(key_BV, axis=-1))
  _, v_B = jax.lax.fori_loop(0, 32, halve, lohi)
  above_BV = key_BV > v_B[:, None]
  tie_BV = key_BV == v_B[:, None]
  before_B = mass_above(v_B)

  def tie_order():  # exclusive cumulative weight among the tied tokens, by id
    w_tie_BV = jnp.where(tie_BV, w_BV, zero)
    return jnp.cumsum(w_tie_BV, axis=-1) - w_tie_BV

  several = jnp.any(jnp.sum(tie_BV, axis=-1) > 1)
  tie_before_BV = jax.lax.cond(several, tie_order, lambda: jnp.zeros_like(w_BV))
  return above_BV | (tie_BV & (before_B[:, None] + tie_before_BV < budget_B[:, None]))


def _keep_by_search(scaled_BV, sampling: SamplingParams) -> jax.Array:
  """The kept set (module doc) of every sequence over the whole vocabulary, by threshold search
  (:func:`_prefix_keep`), for sequences whose set may not lie in the top ``CANDIDATES``."""
  B, V = scaled_BV.shape
  key_BV = _order_key(scaled_BV)
  k_on_B = (sampling.top_k_B > 0) & (sampling.top_k_B < V)
  everything = jnp.ones((B, V), bool)
  keep_BV = jax.lax.cond(
    jnp.any(k_on_B),
    lambda: (
      _prefix_keep(key_BV, jnp.ones((B, V), _F32), sampling.top_k_B.astype(_F32)) | ~k_on_B[:, None]
    ),
    lambda: everything,
  )
  probs_BV = jax.nn.softmax(jnp.where(keep_BV, scaled_BV, -jnp.inf), axis=-1)
  p_on_B = sampling.top_p_B < 1.0
  keep_BV &= jax.lax.cond(
    jnp.any(p_on_B),
    lambda: _prefix_keep(key_BV, probs_BV, sampling.top_p_B) | ~p_on_B[:, None],
    lambda: everything,
  )
  keep_BV &= probs_BV >= sampling.min_p_B[:, None] * jnp.max(probs_BV, axis=-1, keepdims=True)
  best_B = jnp.argmax(scaled_BV, axis=-1)
  return keep_BV | (jnp.arange(V, dtype=best_B.dtype)[None] == best_B[:, None])


def _keep_in_candidates(scaled_BV, sampling: SamplingParams):
  """The kept set restricted to the top ``CANDIDATES`` tokens (``lax.top_k``: ties to the lower
  id, as a stable sort). Returns ``(values_BK, ids_BK, keep_BK, exact_B)``; ``exact_B`` says
  the sequence's whole kept set lies among the candidates (top-k within them, or a top-p /
  min-p cut that drops the last candidate: both cuts are prefixes of the sorted order)."""
  B, V = scaled_BV.shape
  K = min(CANDIDATES, V)
  vals_BK, ids_BK = jax.lax.top_k(scaled_BV, K)
  # the largest value from a reduction, not as ``vals_BK[:, :1]``: XLA:CPU merges a slice of
  # top_k's result into the sort it lowers to, which is then no longer recognised as TopK and
  # stays a full sort of the vocabulary (an optimization_barrier around top_k avoided that but
  # crashed XLA's SPMD partitioner in a sharded decode loop)
  top_B1 = jnp.max(scaled_BV, axis=-1, keepdims=True)
  rank_K = jnp.arange(K, dtype=jnp.int32)
  k_on_B = (sampling.top_k_B > 0) & (sampling.top_k_B < V)
  k_in_B = k_on_B & (sampling.top_k_B <= K)
  keep_BK = rank_K[None] < jnp.where(k_in_B, sampling.top_k_B, K)[:, None]
  e_BK = jnp.exp(vals_BK - top_B1)
  # top-k renormalises over its k tokens; without top-k the normaliser is the whole vocabulary
  z_top_B = jnp.sum(jnp.where(keep_BK, e_BK, 0.0), axis=-1)
  z_all_B = jax.lax.cond(  # a pass over the vocabulary that SPADE's top-k 20 does not need
    jnp.any(~k_in_B),
    lambda: jnp.sum(jnp.exp(scaled_BV - top_B1), axis=-1),
    lambda: jnp.ones((B,), _F32),
  )
  probs_BK = jnp.where(keep_BK, e_BK, 0.0) / jnp.where(k_in_B, z_top_B, z_all_B)[:, None]
  mass_before_BK = jnp.cumsum(probs_BK, axis=-1) - probs_BK
  top_p_B = sampling.top_p_B[:, None]
  keep_BK &= (mass_before_BK < top_p_B) | (top_p_B >= 1.0)
  keep_BK &= probs_BK >= sampling.min_p_B[:, None] * probs_BK[:, :1]
  keep_BK |= rank_K[None] == 0
  exact_B = k_in_B | (~k_on_B & ~keep_BK[:, K - 1]) | (K == V)
  return vals_BK, ids_BK, keep_BK, exact_B


def kept_tokens(scaled_BV, sampling: SamplingParams) -> jax.Array:
  """Bool ``[B, V]``: the tokens each sequence may sample from temperature-scaled logits
  (top-k, then top-p, then min-p, as the module doc says), by the path :func:`choose_tokens`
  takes. For tests and inspection."""
  B, V = scaled_BV.shape
  scaled_BV = scaled_BV.astype(_F32)
  _, ids_BK, keep_BK, exact_B = _keep_in_candidates(scaled_BV, sampling)

  def scatter():
    rows_BK = jnp.broadcast_to(jnp.arange(B)[:, None], ids_BK.shape)
    return jnp.zeros((B, V), bool).at[rows_BK, ids_BK].set(keep_BK)

  return jax.lax.cond(jnp.all(exact_B), scatter, lambda: _keep_by_search(scaled_BV, sampling))


def _truncated_choice(key, scaled_BV, sampling: SamplingParams, truncating_B) -> jax.Array:
  """Samples from the kept set: among the ``lax.top_k`` candidates when that is exact for every
  truncating sequence (the usual case), else by threshold search over the vocabulary. Neither
  sorts the vocabulary."""
  vals_BK, ids_BK, keep_BK, exact_B = _keep_in_candidates(scaled_BV, sampling)

  def among_candidates():
    noisy_BK = jnp.where(keep_BK, vals_BK, -jnp.inf)
    noisy_BK += jax.random.gumbel(key, vals_BK.shape, _F32)
    choice_B = jnp.argmax(noisy_BK, axis=-1)
    return jnp.take_along_axis(ids_BK, choice_B[:, None], axis=-1)[:, 0]

  def searched():
    keep_BV = _keep_by_search(scaled_BV, sampling)
    noisy_BV = jnp.where(keep_BV, scaled_BV, -jnp.inf)
    noisy_BV += jax.random.gumbel(key, scaled_BV.shape, _F32)
    return jnp.argmax(noisy_BV, axis=-1)

  exact = jnp.all(exact_B | ~truncating_B)
  return jax.lax.cond(exact, among_candidates, searched).astype(jnp.int32)


def choose_tokens(key, logits_BV, sampling: SamplingParams) -> jax.Array:
  """Chooses one token per sequence from (processor-masked) logits, as the module doc says.

  Untruncated sampled sequences draw Gumbel noise over the vocabulary; truncating ones go
  through :func:`_truncated_choice` (``lax.top_k`` candidates, a threshold search when those
  do not hold the kept set; no vocabulary sort). Each branch runs only when some sequence
  needs it (``lax.cond``), so all-greedy decoding costs one argmax.
  """
  logits_BV = logits_BV.astype(_F32)
  greedy_tok_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  temp_B = jnp.where(sampling.greedy_B, 1.0, sampling.temperature_B).astype(_F32)
  scaled_BV = logits_BV / temp_B[:, None]
  sampled_B = ~sampling.greedy_B
  truncating_B = sampled_B & (
    (sampling.top_k_B > 0) | (sampling.top_p_B < 1.0) | (sampling.min_p_B > 0)
  )
  plain_B = sampled_B & ~truncating_B
  none_B = jnp.zeros_like(greedy_tok_B)

  def plain():
    noise_BV = jax.random.gumbel(key, scaled_BV.shape, _F32)
    return jnp.argmax(scaled_BV + noise_BV, axis=-1).astype(jnp.int32)

  def truncated():
    return _truncated_choice(jax.random.fold_in(key, 1), scaled_BV, sampling, truncating_B)

  plain_tok_B = jax.lax.cond(jnp.any(plain_B), plain, lambda: none_B)
  trunc_tok_B = jax.lax.cond(jnp.any(truncating_B), truncated, lambda: none_B)
  drawn_B = jnp.where(truncating_B, trunc_tok_B, plain_tok_B)
  return jnp.where(sampling.greedy_B, greedy_tok_B, drawn_B)
