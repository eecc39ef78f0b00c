"""Queued forced tokens consumed in chunks: one multi-token forward instead of a step per token.

The decode loop (:func:`spade_jax.engine.decode.decode_step`) consumes an environment's feedback one
token per step, and every step reads the whole KV cache. In a multi-turn rollout with short
answers most steps do that. When *every* active sequence has at least two forced tokens
queued, :func:`chunk_step` consumes up to ``width`` of them per sequence in one forward pass
over the chunk -- the multi-turn analogue of chunked prefill. The forward (`chunk_forward`)
is :func:`spade_jax.engine.kv_cache.decode_forward` for ``T`` tokens: the same block
(:func:`spade_jax.models.block.block`) with :func:`spade_jax.engine.kv_cache.chunk_attend`, on
the decode cache's own layout (the model's ``[.., S, K, H]`` cached forward is
~10x slower on XLA:CPU for this shape).

Layout. Sequences share the cache write index. The chunk writes slots ``[index, index +
width)``: sequence ``b``'s ``c_b`` consumed tokens are valid, the rest of its chunk invalid;
the index advances by ``max_b c_b`` (slots past it are rewritten by later steps). So each
sequence sees exactly the tokens and RoPE positions that ``c_b`` single steps would give it,
with loss mask 0, log-prob 0, the processor updated token by token, and ``logits_BV`` after
its last consumed token; values differ from single steps only by float rounding (attention
over a chunk). A sequence with fewer tokens queued than the longest waits ``max c - c_b``
slots (it would have sampled in them), which costs cache slots, not steps. No randomness is
used (the key is not split).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax import sharding
from spade_jax.engine.decode import CACHE_FULL, RUNNING, TRACES, DecodeState, constrain_state
from spade_jax.engine.kv_cache import (
  DecodeCache,
  DecodeWeights,
  chunk_attend,
  constrain_cache,
  prepare_weights,
)
from spade_jax.engine.sampling import LogitsProcessor
from spade_jax.models.block import block, rms_norm, rope_tables
from spade_jax.models.config import TransformerConfig

_F32 = jnp.float32


def chunk_forward(
  cfg: TransformerConfig, weights: DecodeWeights, tok_BC, pos_BC, mask_BC, cache: DecodeCache
):
  """Runs ``C`` tokens per sequence at slots ``[index, index + C)`` (``mask_BC`` False: written
  but never visible) -> final-norm hidden states ``[B, C, D]`` and the cache (index not moved).
  Token ``t`` attends to the valid slots before ``index + t`` and to itself."""
  index, S = cache.index, cache.size
  zero = jnp.zeros((), jnp.int32)
  B, C = tok_BC.shape
  x_BCD = jnp.take(weights.embed_VD, tok_BC.astype(jnp.int32), axis=0).astype(_F32)
  x_BCD = sharding.constrain(x_BCD, ("batch", "length", "act_embed"))
  sin_BCH, cos_BCH = rope_tables(cfg, pos_BC, mask_BC)
  valid_BS = jax.lax.dynamic_update_slice(cache.valid_BS, mask_BC, (zero, index))
  visible_CS = jnp.arange(S)[None, :] <= (index + jnp.arange(C))[:, None]
  mask_BCS = visible_CS[None] & valid_BS[:, None, :]
  ks, vs = list(cache.k), list(cache.v)
  for i, w in enumerate(weights.layers):
    attend = chunk_attend(cfg, ks[i], vs[i], mask_BCS, index)
    x_BCD, (ks[i], vs[i]) = block(cfg, w, x_BCD, sin_BCH, cos_BCH, attend)
  hidden_BCD = rms_norm(x_BCD, weights.final_norm_D, cfg.rms_eps)
  return hidden_BCD, constrain_cache(DecodeCache(tuple(ks), tuple(vs), valid_BS, index))


def chunkable(state: DecodeState, width: int) -> jax.Array:
  """True when some sequence is active, every active one has >= 2 forced tokens queued, and
  ``width`` slots are free (the chunk's cache write must not be clamped)."""
  active_B = state.active_B()
  left_B = state.queue_len_B - state.queue_pos_B
  room = state.cache.index + width <= state.cache_size
  return jnp.any(active_B) & jnp.all(~active_B | (left_B >= 2)) & room


def chunk_step(
  graphdef,
  params,
  state: DecodeState,
  width: int,
  processor: LogitsProcessor | None = None,
  weights: DecodeWeights | None = None,
) -> DecodeState:
  """Consumes up to ``width`` queued forced tokens of every active sequence (see the module
  docstring). Call it only where `chunkable` holds (e.g. in a ``lax.cond``); inside a loop
  pass ``weights`` (`spade_jax.engine.decode.decode_weights`) computed outside it."""
  TRACES["chunk_step"] += 1
  model = nnx.merge(graphdef, params)
  weights = prepare_weights(model) if weights is None else weights
  B, S = state.batch, state.cache_size
  Q = state.queue_size
  index = state.cache.index
  active_B = state.active_B()
  left_B = jnp.maximum(state.queue_len_B - state.queue_pos_B, 0)
  c_B = jnp.where(active_B, jnp.minimum(left_B, width), 0)
  j_C = jnp.arange(width, dtype=jnp.int32)
  take_BC = j_C[None] < c_B[:, None]
  at_BC = jnp.clip(state.queue_pos_B[:, None] + j_C[None], 0, Q - 1)
  tok_BC = jnp.where(take_BC, jnp.take_along_axis(state.queue_BQ, at_BC, axis=1), 0)
  pos_BC = state.positions_B[:, None] + j_C[None]
  hidden_BCD, cache = chunk_forward(model.cfg, weights, tok_BC, pos_BC, take_BC, state.cache)
  last_B = jnp.clip(c_B - 1, 0, width - 1)
  h_BD = jnp.take_along_axis(hidden_BCD, last_B[:, None, None], axis=1)[:, 0]
  logits_BV = jnp.einsum(
    "bd,dv->bv",
    h_BD.astype(model.cfg.dtype),
    weights.unembed_DV.astype(model.cfg.dtype),
    preferred_element_type=_F32,
  )
  logits_BV = sharding.constrain(logits_BV, ("batch", "act_vocab"))
  cache = cache.replace(index=index + jnp.max(c_B))

  def put(buf_BS, cols_BC):
    return jax.lax.dynamic_update_slice(buf_BS, cols_BC.astype(buf_BS.dtype), (0, index))

  full = cache.index >= S
  reason_B = jnp.where(full & ~state.done_B & (state.stop_reason_B == RUNNING), CACHE_FULL, 0)
  proc_state = state.proc_state
  if processor is not None:
    forced_B = jnp.zeros((B,), bool)

    def update(k, st):
      new = processor.update(st, tok_BC[:, k], forced_B)
      keep = k < c_B
      return jax.tree.map(
        lambda n, o: jnp.where(keep.reshape(keep.shape + (1,) * (n.ndim - 1)), n, o), new, st
      )

    proc_state = jax.lax.fori_loop(0, width, update, proc_state)
  zeros_BC = jnp.zeros((B, width), jnp.int32)
  return constrain_state(
    state.replace(
      tokens_BS=put(state.tokens_BS, tok_BC),
      loss_mask_BS=put(state.loss_mask_BS, zeros_BC),
      logprobs_BS=put(state.logprobs_BS, zeros_BC),
      cache=cache,
      logits_BV=jnp.where(active_B[:, None], logits_BV, state.logits_BV),
      positions_B=state.positions_B + c_B,
      done_B=state.done_B | full,
      stop_reason_B=jnp.where(reason_B == CACHE_FULL, CACHE_FULL, state.stop_reason_B),
      queue_pos_B=state.queue_pos_B + c_B,
      proc_state=proc_state,
      step=state.step + 1,
    )
  )


def chunk_prefill(
  graphdef,
  params,
  tokens_BP,
  valid_BP,
  positions_BP,
  max_new_B,
  stop_ids_BK,
  key,
  *,
  cache_size: int,
  width: int,
  queue_size: int,
  cache_dtype=None,
  processor: LogitsProcessor | None = None,
) -> DecodeState:
  """`spade_jax.engine.decode.prefill` through `chunk_forward` (``P % width == 0``), for *left-padded*
  prompts (every prompt's last token in slot ``P - 1``). Same state, values equal up to float
  rounding; on XLA:CPU several times faster than the model's cached forward."""
  TRACES["chunk_prefill"] += 1
  model = nnx.merge(graphdef, params)
  cfg = model.cfg
  B, P = tokens_BP.shape
  if P % width or P >= cache_size:
    raise ValueError(f"prompt slots {P} must be a multiple of {width} and < {cache_size}")
  weights = prepare_weights(model)
  dtype = cache_dtype or cfg.dtype
  K, H = cfg.num_kv_heads, cfg.head_dim
  cache = DecodeCache(
    k=tuple(jnp.zeros((B, K, H, cache_size), dtype) for _ in range(cfg.num_layers)),
    v=tuple(jnp.zeros((B, K, cache_size, H), dtype) for _ in range(cfg.num_layers)),
    valid_BS=jnp.zeros((B, cache_size), bool),
    index=jnp.zeros((), jnp.int32),
  )
  n = P // width

  # chunks that are padding in every row are skipped: their slots stay empty and invalid,
  # which is what writing them would leave visible (nothing), so the state is unchanged
  lead_B = jnp.where(jnp.any(valid_BP, axis=1), jnp.argmax(valid_BP, axis=1), P)
  first = jnp.min(lead_B).astype(jnp.int32) // width

  def body(i, carry):
    cache, _ = carry
    tok_BC, valid_BC, pos_BC = (
      jax.lax.dynamic_slice_in_dim(x, i * width, width, axis=1)
      for x in (tokens_BP, valid_BP, positions_BP)
    )
    hidden_BCD, cache = chunk_forward(cfg, weights, tok_BC, pos_BC, valid_BC, cache)
    return cache.replace(index=cache.index + width), hidden_BCD[:, -1]

  last_BD = jnp.zeros((B, cfg.embed_dim), _F32)
  cache = cache.replace(index=first * width)
  cache, last_BD = jax.lax.fori_loop(first, n, body, (cache, last_BD))
  logits_BV = jnp.einsum(
    "bd,dv->bv",
    last_BD.astype(cfg.dtype),
    weights.unembed_DV.astype(cfg.dtype),
    preferred_element_type=_F32,
  )
  zeros_B = jnp.zeros((B,), jnp.int32)
  tokens_BS = jnp.zeros((B, cache_size), jnp.int32).at[:, :P].set(jnp.where(valid_BP, tokens_BP, 0))
  return constrain_state(
    DecodeState(
      tokens_BS=tokens_BS,
      loss_mask_BS=jnp.zeros((B, cache_size), bool),
      logprobs_BS=jnp.zeros((B, cache_size), _F32),
      cache=constrain_cache(cache),
      logits_BV=sharding.constrain(logits_BV, ("batch", "act_vocab")),
      positions_B=jnp.sum(valid_BP, axis=1, dtype=jnp.int32),
      done_B=jnp.zeros((B,), bool),
      waiting_B=jnp.zeros((B,), bool),
      stop_reason_B=zeros_B,
      n_new_B=zeros_B,
      max_new_B=max_new_B.astype(jnp.int32),
      stop_ids_BK=stop_ids_BK.astype(jnp.int32),
      queue_BQ=jnp.zeros((B, queue_size), jnp.int32),
      queue_len_B=zeros_B,
      queue_pos_B=zeros_B,
      proc_state=None if processor is None else processor.init_state(B),
      key=key,
      step=jnp.zeros((), jnp.int32),
      prompt_slots=jnp.asarray(P, jnp.int32),
    )
  )
