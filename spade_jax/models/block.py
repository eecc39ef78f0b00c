"""The transformer block and the helpers every forward shares.

:func:`block` is the one pre-norm block (q/k/v projections, bias, qk-norm, RoPE, attention,
output projection, SwiGLU MLP or Qwen3-MoE sparse MLP, residuals) run by the training/prefill forward
(:class:`spade_jax.models.Transformer`), the decode step
(:func:`spade_jax.engine.kv_cache.decode_forward`) and the chunked forward
(:func:`spade_jax.engine.chunk.chunk_forward`). What differs between them -- where the new
keys/values are cached and in which layout they are attended to -- is the ``attend`` callable the
caller passes; each builds it on :func:`masked_attention` or, for the model's own forward over
a whole sequence or a prefill chunk, on :func:`attention`, which dispatches on
``cfg.attention_impl``:

* ``"reference"``: :func:`masked_attention` (einsum, ``MASK_VALUE`` where masked, float32
  softmax), queries in chunks of ``cfg.attention_chunk``; the parity reference.
* ``"xla"``: ``jax.nn.dot_product_attention(implementation="xla")`` with the exact boolean mask,
  queries chunked the same way; equal to the reference up to float rounding.
* Both, where the mask is exactly causal (the full forward without ``mask_BT``: training and
  the GRPO update), attend in causal query blocks (:func:`causal_block_size`: 64 queries or
  more, at most 8 blocks, at most ``attention_chunk``): a block's queries see only the keys up
  to its end, so the scores above the diagonal's blocks are never computed (the update at
  16 x 192 tokens 5-11 % faster, at 3 x 1024 1.3-1.6x on the 2-core CPU; BUILD_NOTES).
* ``"cudnn"``: ``implementation="cudnn"`` (cuDNN flash attention; a CUDA GPU and a bf16/fp16
  ``cfg.dtype``, else a ``ValueError`` at trace time), unchunked. Where the mask is exactly
  causal with no padding (the full forward without ``mask_BT``: training and the GRPO update)
  it is ``is_causal=True`` and cuDNN never computes the masked half; otherwise (padding masks,
  a prefill chunk's causal-with-offset mask over the cache) the boolean mask, which JAX hands
  to cuDNN as an additive bias: exact, but without the causal skip.
* ``"auto"``: ``"cudnn"`` where it applies (GPU, bf16/fp16, head_dim a multiple of 8 and at
  most 128, or 256 from compute capability 9.0), else ``"xla"``.

The decode step and the engine's chunked forward (:mod:`spade_jax.engine.kv_cache`) use
:func:`masked_attention` on their own ``[B, K, H, S]`` cache layout (the one-token step on the
CPU backend: the same arithmetic as broadcast-multiply + sum).

Matmuls run in ``cfg.dtype`` and accumulate in float32; norms, softmax and the residual stream
are float32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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


def resolve_attention_impl(cfg: TransformerConfig) -> str:
  """The implementation ``cfg.attention_impl`` selects on this process's default backend:
  ``"reference"``, ``"xla"`` or ``"cudnn"`` (``"auto"`` resolved). ``"cudnn"`` where cuDNN
  cannot run (no CUDA GPU, a float32 ``cfg.dtype``) raises ``ValueError``; ``"auto"`` falls
  back to ``"xla"`` there."""
  impl = cfg.attention_impl
  if impl in ("reference", "xla"):
    return impl
  why_not = _cudnn_unsupported(cfg)
  if impl == "auto":
    return "xla" if why_not else "cudnn"
  if why_not:
    raise ValueError(
      f"attention_impl='cudnn' cannot run here: {why_not}; use attention_impl='auto' (cuDNN "
      "where it applies, else XLA) or 'xla'"
    )
  return "cudnn"


def _cudnn_unsupported(cfg: TransformerConfig) -> str | None:
  """Why cuDNN flash attention cannot run ``cfg`` on the default backend (None: it can)."""
  backend = jax.default_backend()
  if backend != "gpu":
    return f"it needs a CUDA GPU and the default JAX backend is {backend!r}"
  device = jax.devices()[0]
  capability = getattr(device, "compute_capability", None)
  if capability is None:  # e.g. ROCm
    return f"the GPU {device.device_kind!r} is not a CUDA device"
  if jnp.dtype(cfg.dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
    return f"it needs a bfloat16 or float16 compute dtype, not {jnp.dtype(cfg.dtype).name}"
  major = int(str(capability).split(".")[0])
  h_max = 256 if major >= 9 else 128
  if cfg.head_dim % 8 or cfg.head_dim > h_max:
    return f"head_dim={cfg.head_dim} must be a multiple of 8 and <= {h_max} on this GPU"
  return None


def attention(
  cfg: TransformerConfig, q_BTNH, k_BSKH, v_BSKH, mask_BTS, *, causal: bool = False
) -> jax.Array:
  """Softmax attention of queries ``[B, T, N, H]`` to keys/values ``[B, S, K, H]`` (``N`` a
  multiple of ``K``: grouped-query attention; query head ``n`` reads kv head ``n // (N //
  K)``) where the boolean ``mask_BTS`` holds, in ``cfg.attention_impl``'s implementation (see
  the module docstring) -> float32 ``[B, T, N, H]``. ``causal=True`` promises that
  ``mask_BTS`` is exactly ``tril(ones(T, S))`` for every sequence (no padding), which lets
  cuDNN skip the masked half and the other two attend in causal query blocks
  (:func:`_causal_blocks`: the blocks above the diagonal are never computed)."""
  impl = resolve_attention_impl(cfg)
  dt = cfg.dtype
  if impl == "cudnn":
    out = jax.nn.dot_product_attention(
      q_BTNH.astype(dt),
      k_BSKH.astype(dt),
      v_BSKH.astype(dt),
      mask=None if causal else mask_BTS[:, None],
      is_causal=causal,
      implementation="cudnn",
    )
    return out.astype(F32)
  if impl == "xla":

    def one(q, k, v, m):
      out = jax.nn.dot_product_attention(
        q.astype(dt), k.astype(dt), v.astype(dt), mask=m[:, None], implementation="xla"
      )
      return out.astype(F32)

  else:

    def one(q, k, v, m):
      B, T, N, H = q.shape
      K = k.shape[2]
      out = _grouped_attention(q.reshape(B, T, K, N // K, H), k, v, m[:, None, None], dt)
      return out.reshape(B, T, N, H)

  if causal:
    return _causal_blocks(one, q_BTNH, k_BSKH, v_BSKH, mask_BTS, cfg.attention_chunk)
  return _query_chunks(
    lambda q, m: one(q, k_BSKH, v_BSKH, m), q_BTNH, mask_BTS, cfg.attention_chunk
  )


# Causal query blocks: at least CAUSAL_BLOCK queries each, at most CAUSAL_MAX_BLOCKS of them
# (benchmarks/causal_attention.py, 2-core CPU, 3 x 1024 tokens: blocks of 128 within 7 % of
# blocks of 64 at less than half the compile time). Past CAUSAL_UNROLL_LIMIT blocks (a sequence
# over 32 x attention_chunk) the blocks, unrolled at trace time, would swell the layer body: the
# masked chunks run instead.
CAUSAL_BLOCK, CAUSAL_MAX_BLOCKS, CAUSAL_UNROLL_LIMIT = 64, 8, 32


def causal_block_size(T: int, chunk: int) -> int:
  """Queries per block of :func:`attention`'s causal path for a length-``T`` sequence:
  ``max(CAUSAL_BLOCK, ceil(T / CAUSAL_MAX_BLOCKS))``, at most ``chunk`` (the memory bound of
  ``cfg.attention_chunk``; 0: none)."""
  c = max(CAUSAL_BLOCK, -(-T // CAUSAL_MAX_BLOCKS))
  return min(c, chunk) if chunk else c


def _causal_blocks(fn, q_BT_, k_BS_, v_BS_, mask_BTS, chunk):
  """``fn(q, k, v, mask)`` over causal query blocks: the block of queries ``[s, e)`` attends
  to keys ``[0, e)`` only, so the fully masked upper blocks of the ``[T, S]`` scores are never
  computed (about half the attention FLOPs for many blocks), and each block's scores are small
  enough to stay in cache. Exact: a causal query never sees a key past its block's end. Each
  block is rematerialised in the backward pass when ``T > chunk``, as :func:`_query_chunks`
  does. Needs ``S == T`` (no cache). More than ``CAUSAL_UNROLL_LIMIT`` blocks: the masked
  :func:`_query_chunks` path (one compiled chunk, no causal skip)."""
  T = q_BT_.shape[1]
  c = causal_block_size(T, chunk)
  if T <= c:
    return fn(q_BT_, k_BS_, v_BS_, mask_BTS)
  if -(-T // c) > CAUSAL_UNROLL_LIMIT:
    return _query_chunks(lambda q, m: fn(q, k_BS_, v_BS_, m), q_BT_, mask_BTS, chunk)
  one = jax.checkpoint(fn) if chunk and T > chunk else fn
  outs = []
  for s in range(0, T, c):
    e = min(T, s + c)
    outs.append(one(q_BT_[:, s:e], k_BS_[:, :e], v_BS_[:, :e], mask_BTS[:, s:e, :e]))
  return jnp.concatenate(outs, axis=1)


_SCORES, _OUT = "btkgh,bskh->bkgts", "bkgts,bskh->btkgh"


def _as_used(x, dt):
  """``x`` as a forward matmul in ``dt`` saw it, in float32: the written-out backward passes
  multiply float32 cotangents by these, as JAX's derived ones do (cotangents are not rounded
  to ``dt``)."""
  return x.astype(dt).astype(F32)


def _dot32(spec, a, b):
  return jnp.einsum(spec, a, b, preferred_element_type=F32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _grouped_attention(q_BTKGH, k_BSKH, v_BSKH, mask, dt):
  """``masked_attention`` in the grouped layout (``mask`` broadcasts against ``[B, K, G, T,
  S]``), with its backward written out: from the kept probabilities, ``dS = P (dP - rowsum(P
  dP))``, zero where masked; the same arithmetic as the derived one in fewer passes over the
  ``[T, S]`` scores (issue 26's profile)."""
  return masked_attention(q_BTKGH, k_BSKH, v_BSKH, mask, dt, _SCORES, _OUT)


def _grouped_attention_fwd(q_BTKGH, k_BSKH, v_BSKH, mask, dt):
  H = q_BTKGH.shape[-1]
  scores = dense(q_BTKGH, k_BSKH, _SCORES, dt) * (H**-0.5)
  probs = jax.nn.softmax(jnp.where(mask, scores, MASK_VALUE), axis=-1)
  out = dense(probs, v_BSKH, _OUT, dt)
  return out, (q_BTKGH, k_BSKH, v_BSKH, mask, probs)


def _grouped_attention_bwd(dt, res, d_out):
  q_BTKGH, k_BSKH, v_BSKH, mask, probs = res
  H = q_BTKGH.shape[-1]
  q, k, v = (_as_used(x, dt) for x in (q_BTKGH, k_BSKH, v_BSKH))
  d_probs = _dot32(_SCORES, d_out, v)
  d_scores = probs * (d_probs - jnp.sum(probs * d_probs, axis=-1, keepdims=True))
  d_scores = jnp.where(mask, d_scores, 0.0) * (H**-0.5)
  d_q = _dot32(_OUT, d_scores, k)
  d_k = _dot32("bkgts,btkgh->bskh", d_scores, q)
  d_v = _dot32("bkgts,btkgh->bskh", _as_used(probs, dt), d_out)
  d_mask = np.zeros(jnp.shape(mask), jax.dtypes.float0)
  return (
    d_q.astype(q_BTKGH.dtype),
    d_k.astype(k_BSKH.dtype),
    d_v.astype(v_BSKH.dtype),
    d_mask,
  )


_grouped_attention.defvjp(_grouped_attention_fwd, _grouped_attention_bwd)


def _query_chunks(fn, q_BT_, mask_BTS, chunk):
  """``fn(q, mask)`` with the queries (axis 1) in chunks of ``chunk`` when longer, each chunk
  rematerialised in the backward pass, so memory is O(chunk x S) instead of O(T x S) for long
  sequences."""
  B, T = q_BT_.shape[:2]
  if not chunk or T <= chunk:
    return fn(q_BT_, mask_BTS)
  n = -(-T // chunk)
  pad = n * chunk - T
  q = jnp.pad(q_BT_, ((0, 0), (0, pad)) + ((0, 0),) * (q_BT_.ndim - 2))
  m = jnp.pad(mask_BTS, ((0, 0), (0, pad), (0, 0)))
  q_nBC_ = jnp.moveaxis(q.reshape(B, n, chunk, *q.shape[2:]), 1, 0)
  m_nBCS = jnp.moveaxis(m.reshape(B, n, chunk, m.shape[-1]), 1, 0)
  one = jax.checkpoint(lambda xs: fn(xs[0], xs[1]))
  out_nBC_ = jax.lax.map(one, (q_nBC_, m_nBCS))
  out = jnp.moveaxis(out_nBC_, 0, 1).reshape(B, n * chunk, *out_nBC_.shape[3:])
  return out[:, :T]


def block(
  cfg: TransformerConfig, w: dict, x_BTD, sin_BTH, cos_BTH, attend: Attend
) -> tuple[jax.Array, Any]:
  """One pre-norm block on the residual stream ``x_BTD`` (float32) with this layer's weights
  ``w``; ``attend`` caches and attends the RoPE'd keys/values (see :data:`Attend`). Returns the
  new residual stream and ``attend``'s ``aux``."""
  x_BTD, aux, _ = block_with_router(cfg, w, x_BTD, sin_BTH, cos_BTH, attend)
  return x_BTD, aux


def dense_mlp(cfg: TransformerConfig, w: dict, h_BTD) -> jax.Array:
  """The SwiGLU MLP on the normed residual ``h_BTD`` (its backward written out:
  :func:`_swiglu`)."""
  return _swiglu(h_BTD, w["gate"], w["up"], w["down"], jnp.dtype(cfg.dtype))


_ACT_MLP = ("batch", "length", "act_mlp")


def _swiglu_forward(h_BTD, w_gate, w_up, w_down, dt):
  gate_BTF = dense(h_BTD, w_gate, "btd,df->btf", dt)
  up_BTF = dense(h_BTD, w_up, "btd,df->btf", dt)
  act_BTF = sharding.constrain(jax.nn.silu(gate_BTF) * up_BTF, _ACT_MLP)
  return dense(act_BTF, w_down, "btf,fd->btd", dt), (gate_BTF, up_BTF)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _swiglu(h_BTD, w_gate, w_up, w_down, dt):
  """``(silu(h @ w_gate) * (h @ w_up)) @ w_down``, matmuls in ``dt`` accumulated in float32.

  The backward is written out rather than derived: on XLA:CPU the derived one wrote the gate's
  gradient transposed (``[F, B*T]``) for the weight-gradient dot, a strided pass that cost more
  than the MLP's matmuls (issue 26's profile); this one is the same arithmetic in plain layouts.
  """
  return _swiglu_forward(h_BTD, w_gate, w_up, w_down, dt)[0]


def _swiglu_fwd(h_BTD, w_gate, w_up, w_down, dt):
  out_BTD, (gate_BTF, up_BTF) = _swiglu_forward(h_BTD, w_gate, w_up, w_down, dt)
  return out_BTD, (h_BTD, w_gate, w_up, w_down, gate_BTF, up_BTF)


def _swiglu_bwd(dt, res, d_out_BTD):
  h_BTD, w_gate, w_up, w_down, gate_BTF, up_BTF = res
  sig_BTF = jax.nn.sigmoid(gate_BTF)
  silu_BTF = gate_BTF * sig_BTF
  act_BTF = silu_BTF * up_BTF
  h, wg, wu, wd = (_as_used(x, dt) for x in (h_BTD, w_gate, w_up, w_down))
  # [D, F] then transposed: the dot's operand transposed by XLA is then the narrow d_out
  d_down = _dot32("btd,btf->df", d_out_BTD, _as_used(act_BTF, dt)).T
  d_act_BTF = sharding.constrain(_dot32("btd,fd->btf", d_out_BTD, wd), _ACT_MLP)
  d_up_BTF = d_act_BTF * silu_BTF
  d_gate_BTF = d_act_BTF * up_BTF * (sig_BTF * (1.0 + gate_BTF * (1.0 - sig_BTF)))
  d_h_BTD = _dot32("btf,df->btd", d_gate_BTF, wg) + _dot32("btf,df->btd", d_up_BTF, wu)
  d_gate = _dot32("btd,btf->df", h, d_gate_BTF)
  d_upw = _dot32("btd,btf->df", h, d_up_BTF)
  return (
    d_h_BTD.astype(h_BTD.dtype),
    d_gate.astype(w_gate.dtype),
    d_upw.astype(w_up.dtype),
    d_down.astype(w_down.dtype),
  )


_swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


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
