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


def _truncated_choice(key, scaled_BV, sampling: SamplingParams) -> jax.Array:
  """Samples with top-k, then top-p, then min-p, in the space of tokens sorted by logit."""
  B, V = scaled_BV.shape
  iota_BV = jnp.broadcast_to(jnp.arange(V, dtype=jnp.int32), (B, V))
  neg_BV, perm_BV = jax.lax.sort((-scaled_BV, iota_BV), dimension=1, num_keys=1, is_stable=True)
  sorted_BV = -neg_BV
  rank_V = jnp.arange(V, dtype=jnp.int32)
  k_B = jnp.where(sampling.top_k_B > 0, jnp.minimum(sampling.top_k_B, V), V)
  keep_BV = rank_V[None] < k_B[:, None]
  probs_BV = jax.nn.softmax(jnp.where(keep_BV, sorted_BV, -jnp.inf), axis=-1)
  mass_before_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV
  top_p_B = sampling.top_p_B[:, None]
  keep_BV &= (mass_before_BV < top_p_B) | (top_p_B >= 1.0)
  keep_BV &= probs_BV >= sampling.min_p_B[:, None] * probs_BV[:, :1]
  keep_BV |= rank_V[None] == 0
  noisy_BV = jnp.where(keep_BV, sorted_BV, -jnp.inf) + jax.random.gumbel(key, (B, V), _F32)
  choice_B = jnp.argmax(noisy_BV, axis=-1)
  return jnp.take_along_axis(perm_BV, choice_B[:, None], axis=-1)[:, 0]


def choose_tokens(key, logits_BV, sampling: SamplingParams) -> jax.Array:
  """Chooses one token per sequence from (processor-masked) logits, as the module doc says.

  The truncation branch (a sort over the vocabulary) and the noise draw only run when some
  sequence needs them (``lax.cond``), so all-greedy decoding costs one argmax.
  """
  logits_BV = logits_BV.astype(_F32)
  greedy_tok_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  temp_B = jnp.where(sampling.greedy_B, 1.0, sampling.temperature_B).astype(_F32)
  scaled_BV = logits_BV / temp_B[:, None]
  sampled_B = ~sampling.greedy_B
  truncating_B = sampled_B & (
    (sampling.top_k_B > 0) | (sampling.top_p_B < 1.0) | (sampling.min_p_B > 0)
  )

  def plain():
    noise_BV = jax.random.gumbel(key, scaled_BV.shape, _F32)
    return jnp.argmax(scaled_BV + noise_BV, axis=-1).astype(jnp.int32)

  def sample():
    return jax.lax.cond(
      jnp.any(truncating_B),
      lambda: _truncated_choice(key, scaled_BV, sampling).astype(jnp.int32),
      plain,
    )

  drawn_B = jax.lax.cond(jnp.any(sampled_B), sample, lambda: greedy_tok_B)
  return jnp.where(sampling.greedy_B, greedy_tok_B, drawn_B)
