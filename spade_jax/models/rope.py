"""Rotary position embeddings: the default RoPE and transformers' scaled variants.

``linear``, ``dynamic``, ``yarn`` and ``llama3`` compute their inverse frequencies and attention
scaling as ``transformers.modeling_rope_utils`` (v5) does, in float32 like torch. The attention
scaling (yarn's mscale) multiplies both sin and cos, so it scales q.k by its square.

``dynamic`` (NTK) depends on the sequence length. transformers recomputes ``inv_freq`` in each
forward from ``seq_len = max(position_ids) + 1`` over the whole batch when it exceeds the length
it last computed for (starting at ``max_position_embeddings``), and resets to the original
frequencies when a call's ``seq_len`` falls below ``max_position_embeddings``. Here every call
computes from its own ``seq_len`` (the largest position among its valid tokens, plus one): the
same as transformers for the calls a fresh model sees in a forward or a greedy generation
(positions only grow; KV-cache decode rotates each new token with the frequencies for its step
while cached keys keep the ones they were written with, exactly as transformers' cache does).
It differs only where transformers' stored state is stale: after a longer call, a later call
whose ``seq_len`` is between ``max_position_embeddings`` and that longer length keeps the longer
call's frequencies there. Stateless, the frequencies stay a pure function of the call under jit.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

F32 = jnp.float32

# rope_type -> the HF rope parameters it reads (transformers ignores all others) and those of
# them it requires (a yarn ``factor`` left None is resolved when parsing, as transformers does).
PARAMETERS = {
  "linear": (("factor",), ("factor",)),
  "dynamic": (("factor",), ("factor",)),
  "llama3": (
    ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
  ),
  "yarn": (
    (
      "factor",
      "original_max_position_embeddings",
      "attention_factor",
      "beta_fast",
      "beta_slow",
      "mscale",
      "mscale_all_dim",
      "truncate",
    ),
    ("factor", "original_max_position_embeddings"),
  ),
}
SCALING_TYPES = tuple(PARAMETERS)


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """A scaled RoPE: ``rope_type`` and its HF rope parameters (HF names; None: not given)."""

  rope_type: str
  factor: float | None = None
  original_max_position_embeddings: int | None = None
  low_freq_factor: float | None = None
  high_freq_factor: float | None = None
  attention_factor: float | None = None
  beta_fast: float | None = None
  beta_slow: float | None = None
  mscale: float | None = None
  mscale_all_dim: float | None = None
  truncate: bool | None = None

  def __post_init__(self):
    if self.rope_type not in PARAMETERS:
      raise ValueError(f"unsupported rope_type {self.rope_type!r}; supported: {SCALING_TYPES}")
    reads, required = PARAMETERS[self.rope_type]
    given = {k for k, v in self.parameters().items() if v is not None}
    unread = sorted(given - set(reads))
    if unread:
      raise ValueError(f"rope_type {self.rope_type!r} does not read {unread}")
    missing = [k for k in required if getattr(self, k) is None]
    if missing:
      raise ValueError(f"rope_type {self.rope_type!r} needs {missing}")

  def parameters(self) -> dict:
    """The HF rope parameters (without ``rope_type``), None for those not given."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)[1:]}


def _default_np(head_dim: int, theta: float) -> np.ndarray:
  exponent = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
  return (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)


def _linear(s: RopeScaling, head_dim, theta, max_position):
  return _default_np(head_dim, theta) / np.float32(s.factor), 1.0


def _llama3(s: RopeScaling, head_dim, theta, max_position):
  inv = _default_np(head_dim, theta)
  old_len = s.original_max_position_embeddings
  low_wavelen = old_len / s.low_freq_factor
  high_wavelen = old_len / s.high_freq_factor
  wavelen = np.float32(2 * math.pi) / inv
  scaled = np.where(wavelen > low_wavelen, inv / np.float32(s.factor), inv)
  smooth = (np.float32(old_len) / wavelen - np.float32(s.low_freq_factor)) / np.float32(
    s.high_freq_factor - s.low_freq_factor
  )
  smoothed = (1 - smooth) * scaled / np.float32(s.factor) + smooth * scaled
  medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
  return np.where(medium, smoothed, scaled).astype(np.float32), 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
  return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(s: RopeScaling, head_dim, theta, max_position):
  original, factor = s.original_max_position_embeddings, s.factor
  attention = s.attention_factor
  if attention is None:
    if s.mscale and s.mscale_all_dim:
      attention = _yarn_mscale(factor, s.mscale) / _yarn_mscale(factor, s.mscale_all_dim)
    else:
      attention = _yarn_mscale(factor)
  beta_fast, beta_slow = s.beta_fast or 32, s.beta_slow or 1

  def correction_dim(rotations):
    return (head_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

  low, high = correction_dim(beta_fast), correction_dim(beta_slow)
  if s.truncate is None or s.truncate:
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, head_dim - 1)
  if low == high:
    high += 0.001  # as transformers: no singular ramp
  pos_freqs = np.power(
    np.float32(theta), np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
  )
  extrapolation = np.float32(1.0) / pos_freqs
  interpolation = np.float32(1.0) / (np.float32(factor) * pos_freqs)
  ramp = np.clip((np.arange(head_dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
  extra_factor = (1 - ramp).astype(np.float32)
  inv = interpolation * (1 - extra_factor) + extrapolation * extra_factor
  return inv.astype(np.float32), float(attention)


_STATIC = {"linear": _linear, "llama3": _llama3, "yarn": _yarn}


def inv_freq(
  head_dim: int,
  theta: float,
  scaling: RopeScaling | None,
  max_position: int,
  positions_BT=None,
  mask_BT=None,
) -> tuple[jnp.ndarray, float]:
  """``(inv_freq [head_dim // 2] float32, attention_scaling)`` of this RoPE. Only ``dynamic``
  reads ``positions_BT`` (and ``mask_BT``, the valid tokens; default all): its sequence length is
  the largest valid position plus one (see the module docstring)."""
  default = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=F32) / head_dim))
  if scaling is None:
    return default, 1.0
  if scaling.rope_type in _STATIC:
    inv, attention = _STATIC[scaling.rope_type](scaling, head_dim, theta, max_position)
    return jnp.asarray(inv), attention
  # dynamic NTK, as transformers' _compute_dynamic_ntk_parameters (float32), per call
  positions_BT = jnp.asarray(positions_BT, jnp.int32)
  if mask_BT is not None:
    positions_BT = jnp.where(mask_BT, positions_BT, 0)
  seq_len = jnp.max(positions_BT) + 1
  length = jnp.maximum(seq_len, max_position).astype(F32)
  factor = scaling.factor
  base = theta * ((factor * length / max_position) - (factor - 1)) ** (head_dim / (head_dim - 2))
  grown = 1.0 / (base ** (jnp.arange(0, head_dim, 2, dtype=F32) / head_dim))
  return jnp.where(seq_len > max_position, grown, default), 1.0
