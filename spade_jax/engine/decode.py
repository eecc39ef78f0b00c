"""The pure, on-device half of the generation engine: ``DecodeState``, prefill, one decode step,
the decode loop, and forced-token feeding.

Everything here is a pure function of pytrees, written for the split NNX pattern:
``graphdef, params = nnx.split(model)`` once, then ``nnx.merge(graphdef, params)`` inside the
trace, so any parameter pytree of the same structure (for example after a GRPO update) runs
through the same compiled program. Higher layers (the host :class:`spade_jax.engine.generate.Engine`,
the on-device multi-turn rollout) compose :func:`decode_step`, :func:`run_loop`,
:func:`feed_arrays` and :func:`finish_arrays` inside their own ``jit`` / ``while_loop``.

Layout. Slot ``s`` of every per-slot buffer (``tokens_BS``, ``loss_mask_BS``, ``logprobs_BS``)
is slot ``s`` of the KV cache. The (padded) prompt fills slots ``[0, prompt_slots)``; each
decode step writes one token per sequence at the shared slot ``cache.index`` and advances it.
A sequence that is done or waiting in that step writes an *invalid* slot (``cache.valid_BS``
False) that no query ever attends to, so a sequence's conversation is exactly its valid slots
in order, and its RoPE positions count only those (``positions_B``).

A step, per sequence: if it has queued forced tokens it consumes the next one (loss mask 0,
log-prob 0, no sampling); otherwise it samples from ``logits_BV`` (loss mask 1, log-prob as
documented in :mod:`spade_jax.engine.sampling`). The chosen token is run through the model at once,
so ``logits_BV`` always holds the next-token logits of everything in the cache. Sampling a
stop token, or the turn's ``max_new_B``-th token, sets ``waiting_B``: the sequence pauses
until :func:`feed_arrays` queues more tokens (or :func:`finish_arrays` ends it). A full cache
ends every sequence.
"""

from __future__ import annotations

import collections
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from spade_jax import sharding
from spade_jax.engine.kv_cache import (
  DecodeCache,
  DecodeWeights,
  constrain_cache,
  decode_forward,
  from_model_cache,
  prepare_weights,
)
from spade_jax.engine.sampling import LogitsProcessor, SamplingParams, choose_tokens, token_logprobs
from spade_jax.models.cache import init_cache

# stop_reason_B values
RUNNING, STOP_TOKEN, LENGTH, CACHE_FULL, FINISHED = 0, 1, 2, 3, 4
STOP_REASONS = ("running", "stop_token", "length", "cache_full", "finished")

# Number of times each jitted engine function was traced (i.e. compiled); see trace_count().
TRACES: collections.Counter = collections.Counter()


def trace_count() -> int:
  """Total traces of the engine's jitted functions so far (a recompilation metric)."""
  return sum(TRACES.values())


@struct.dataclass
class DecodeState:
  """Everything the decode loop carries. Shapes: B batch, S cache slots, K stop ids, Q queue."""

  tokens_BS: jax.Array  # int32 token at each cache slot (0 where the slot is invalid)
  loss_mask_BS: jax.Array  # bool: True where the token was sampled (trainable)
  logprobs_BS: jax.Array  # float32 log-prob of sampled tokens, 0 elsewhere
  cache: DecodeCache  # per-layer K/V (see spade_jax.engine.kv_cache)
  logits_BV: jax.Array  # float32 next-token logits of each sequence (raw model output)
  positions_B: jax.Array  # int32 RoPE position of each sequence's next token
  done_B: jax.Array  # bool: will never decode again
  waiting_B: jax.Array  # bool: paused for input (stop token or turn budget reached)
  stop_reason_B: jax.Array  # int32, one of RUNNING..FINISHED
  n_new_B: jax.Array  # int32 tokens sampled since the prompt / the last feed
  max_new_B: jax.Array  # int32 sampled-token budget per turn
  stop_ids_BK: jax.Array  # int32 stop token ids per sequence, -1 padded
  queue_BQ: jax.Array  # int32 forced tokens waiting to be consumed
  queue_len_B: jax.Array  # int32 number of valid entries in queue_BQ
  queue_pos_B: jax.Array  # int32 next queue entry to consume
  proc_state: Any  # logits-processor state (leaves with a leading batch axis) or None
  key: jax.Array  # raw uint32[2] PRNG key (plain array: host-fetchable, checkpointable)
  step: jax.Array  # int32 decode steps taken since prefill
  prompt_slots: jax.Array  # int32 number of slots the padded prompt occupies

  @property
  def batch(self) -> int:
    return self.tokens_BS.shape[0]

  @property
  def cache_size(self) -> int:
    return self.tokens_BS.shape[1]

  @property
  def queue_size(self) -> int:
    return self.queue_BQ.shape[1]

  def active_B(self) -> jax.Array:
    """Sequences that would consume or sample a token in the next step."""
    return ~self.done_B & ~self.waiting_B & (self.cache.index < self.cache_size)


def constrain_state(state: DecodeState) -> DecodeState:
  """Pins the state's sharding (batch over data/fsdp, kv heads over tensor); no-op without a
  mesh. Applied on every loop iteration so the carry's layout never drifts."""
  if sharding.current_mesh() is None:
    return state

  def by_batch(x):
    if not hasattr(x, "ndim") or x.ndim == 0:
      return x
    return sharding.constrain(x, ("batch",) + (None,) * (x.ndim - 1))

  cache = constrain_cache(state.cache)
  fields = {
    name: by_batch(getattr(state, name))
    for name in (
      "tokens_BS",
      "loss_mask_BS",
      "logprobs_BS",
      "logits_BV",
      "positions_B",
      "done_B",
      "waiting_B",
      "stop_reason_B",
      "n_new_B",
      "max_new_B",
      "stop_ids_BK",
      "queue_BQ",
      "queue_len_B",
      "queue_pos_B",
    )
  }
  proc_state = jax.tree.map(by_batch, state.proc_state)
  return state.replace(cache=cache, proc_state=proc_state, **fields)


def prefill(
  graphdef,
  params,
  tokens_BP,
  valid_BP,
  positions_BP,
  last_B,
  max_new_B,
  stop_ids_BK,
  key,
  *,
  cache_size: int,
  chunk: int,
  queue_size: int,
  cache_dtype=None,
  processor: LogitsProcessor | None = None,
) -> DecodeState:
  """Runs the padded prompts through the model into a fresh cache of ``cache_size`` slots.

  ``valid_BP`` marks real prompt tokens (left or right padding, any mix); ``positions_BP`` are
  their RoPE positions (0..len-1); ``last_B`` is the slot of each prompt's last real token,
  whose logits become ``logits_BV``. The prompt is processed in chunks of ``chunk`` tokens
  (``P % chunk == 0``) so long prompts never build a ``[P, P]`` attention matrix at once.
  """
  TRACES["prefill"] += 1
  model = nnx.merge(graphdef, params)
  B, P = tokens_BP.shape
  if P % chunk or P >= cache_size:
    raise ValueError(f"prompt slots {P} must be a multiple of chunk {chunk} and < {cache_size}")
  cache = init_cache(model.cfg, B, cache_size, cache_dtype)
  n = P // chunk

  def split(x_BP):
    return x_BP.reshape(B, n, chunk).swapaxes(0, 1)

  def body(carry, xs):
    cache, last_BD = carry
    tok_BC, valid_BC, pos_BC, start = xs
    hidden_BCD, cache = model.hidden(tok_BC, pos_BC, cache=cache, mask_BT=valid_BC)
    offset_B = jnp.clip(last_B - start, 0, chunk - 1)
    picked_BD = jnp.take_along_axis(hidden_BCD, offset_B[:, None, None], axis=1)[:, 0]
    here_B = (last_B >= start) & (last_B < start + chunk)
    return (cache, jnp.where(here_B[:, None], picked_BD, last_BD)), None

  starts = jnp.arange(n, dtype=jnp.int32) * chunk
  last_BD = jnp.zeros((B, model.cfg.embed_dim), jnp.float32)
  (cache, last_BD), _ = jax.lax.scan(
    body, (cache, last_BD), (split(tokens_BP), split(valid_BP), split(positions_BP), starts)
  )
  logits_BV = model.logits(last_BD[:, None])[:, 0]
  cache = from_model_cache(cache)
  tokens_BS = jnp.zeros((B, cache_size), jnp.int32).at[:, :P].set(jnp.where(valid_BP, tokens_BP, 0))
  zeros_B = jnp.zeros((B,), jnp.int32)
  state = DecodeState(
    tokens_BS=tokens_BS,
    loss_mask_BS=jnp.zeros((B, cache_size), bool),
    logprobs_BS=jnp.zeros((B, cache_size), jnp.float32),
    cache=cache,
    logits_BV=logits_BV,
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
  return constrain_state(state)


def _where_B(mask_B, new, old):
  """Per-sequence select over a pytree whose leaves have a leading batch axis."""

  def sel(n, o):
    m = mask_B.reshape(mask_B.shape + (1,) * (n.ndim - 1))
    return jnp.where(m, n, o)

  return jax.tree.map(sel, new, old)


def _step(
  cfg,
  weights: DecodeWeights,
  state: DecodeState,
  sampling: SamplingParams,
  processor: LogitsProcessor | None,
) -> DecodeState:
  """One decode step for every sequence (no check that any sequence is active)."""
  S, Q = state.cache_size, state.queue_size
  index = state.cache.index
  active_B = state.active_B()
  forced_B = active_B & (state.queue_pos_B < state.queue_len_B)
  sampled_B = active_B & ~forced_B

  key, sub = jax.random.split(state.key)
  masked_BV = state.logits_BV
  if processor is not None:
    masked_BV = processor.mask(state.proc_state, masked_BV)
  chosen_B = choose_tokens(sub, masked_BV, sampling)
  qpos_B = jnp.clip(state.queue_pos_B, 0, Q - 1)
  queued_B = jnp.take_along_axis(state.queue_BQ, qpos_B[:, None], axis=1)[:, 0]
  token_B = jnp.where(forced_B, queued_B, jnp.where(sampled_B, chosen_B, 0)).astype(jnp.int32)
  logprob_B = jnp.where(sampled_B, token_logprobs(state.logits_BV, token_B, sampling), 0.0)

  logits_BV, cache = decode_forward(cfg, weights, token_B, state.positions_B, state.cache, active_B)
  logits_BV = jnp.where(active_B[:, None], logits_BV, state.logits_BV)

  def put(buf_BS, col_B):
    return jax.lax.dynamic_update_slice(buf_BS, col_B[:, None].astype(buf_BS.dtype), (0, index))

  n_new_B = state.n_new_B + sampled_B
  hit_stop_B = sampled_B & jnp.any(token_B[:, None] == state.stop_ids_BK, axis=1)
  budget_B = sampled_B & ~hit_stop_B & (n_new_B >= state.max_new_B)
  reason_B = jnp.where(hit_stop_B, STOP_TOKEN, jnp.where(budget_B, LENGTH, state.stop_reason_B))
  full = cache.index >= S
  reason_B = jnp.where(full & ~state.done_B & (reason_B == RUNNING), CACHE_FULL, reason_B)
  proc_state = state.proc_state
  if processor is not None:
    proc_state = _where_B(active_B, processor.update(proc_state, token_B, sampled_B), proc_state)

  return state.replace(
    tokens_BS=put(state.tokens_BS, token_B),
    loss_mask_BS=put(state.loss_mask_BS, sampled_B),
    logprobs_BS=put(state.logprobs_BS, logprob_B),
    cache=cache,
    logits_BV=logits_BV,
    positions_B=state.positions_B + active_B,
    done_B=state.done_B | full,
    waiting_B=state.waiting_B | hit_stop_B | budget_B,
    stop_reason_B=reason_B.astype(jnp.int32),
    n_new_B=n_new_B,
    queue_pos_B=state.queue_pos_B + forced_B,
    proc_state=proc_state,
    key=key,
    step=state.step + 1,
  )


def decode_weights(graphdef, params) -> DecodeWeights:
  """The parameters regrouped per layer for decoding (hoist it out of an outer loop)."""
  return prepare_weights(nnx.merge(graphdef, params))


def decode_step(
  graphdef,
  params,
  state: DecodeState,
  sampling: SamplingParams,
  processor: LogitsProcessor | None = None,
  weights: DecodeWeights | None = None,
  *,
  skip_idle: bool = True,
) -> DecodeState:
  """One step of the decode loop (pure; jit it or call it inside a loop body).

  A no-op (no cache slot used) when no sequence is active. Inside an outer loop, pass
  ``weights=decode_weights(graphdef, params)`` computed outside it, so the per-layer
  parameter slices are made once instead of every step. ``skip_idle=False`` drops that
  check (the caller guarantees an active sequence and a free slot, e.g. in its loop
  condition): no ``lax.cond`` around the step, whose operands include the whole cache.
  """
  cfg = nnx.merge(graphdef, params).cfg
  weights = decode_weights(graphdef, params) if weights is None else weights
  if not skip_idle:
    return constrain_state(_step(cfg, weights, state, sampling, processor))
  return jax.lax.cond(
    jnp.any(state.active_B()),
    lambda s: constrain_state(_step(cfg, weights, s, sampling, processor)),
    lambda s: s,
    state,
  )


def run_loop(
  graphdef,
  params,
  state: DecodeState,
  sampling: SamplingParams,
  processor: LogitsProcessor | None = None,
  max_steps=None,
) -> DecodeState:
  """``lax.while_loop`` of decode steps until every sequence is done or waiting (or after
  ``max_steps`` more steps; a traced int, so changing it does not recompile)."""
  model = nnx.merge(graphdef, params)
  weights = prepare_weights(model)
  i32_max = jnp.iinfo(jnp.int32).max
  budget = i32_max if max_steps is None else jnp.asarray(max_steps, jnp.int32)
  # saturating add: step + budget must not wrap around (a later run() would stop at once)
  limit = jnp.where(budget >= i32_max - state.step, i32_max, state.step + budget)

  def cond(s):
    return jnp.any(s.active_B()) & (s.step < limit)

  def body(s):
    return constrain_state(_step(model.cfg, weights, s, sampling, processor))

  return jax.lax.while_loop(cond, body, constrain_state(state))


def feed_arrays(state: DecodeState, resume_B, tokens_BF, lengths_B, max_new_B=None) -> DecodeState:
  """Queues ``tokens_BF[b, :lengths_B[b]]`` as forced tokens for each ``resume_B`` sequence and
  resumes it (clears ``waiting_B``, resets its turn's sampled-token count; ``max_new_B``
  optionally sets a new turn budget). Tokens already queued stay first. Finished sequences are
  ignored. Pure and jittable; tokens beyond the queue's capacity ``Q`` are dropped (the host
  ``Engine.feed`` refuses them instead)."""
  B, Q = state.queue_BQ.shape
  F = tokens_BF.shape[1]
  resume_B = resume_B & ~state.done_B
  lengths_B = jnp.clip(lengths_B.astype(jnp.int32), 0, F)
  left_B = jnp.maximum(state.queue_len_B - state.queue_pos_B, 0)
  j_Q = jnp.arange(Q, dtype=jnp.int32)
  old_BQ = jnp.take_along_axis(
    state.queue_BQ, jnp.clip(state.queue_pos_B[:, None] + j_Q[None], 0, Q - 1), axis=1
  )
  new_at_BQ = j_Q[None] - left_B[:, None]
  new_BQ = jnp.take_along_axis(tokens_BF.astype(jnp.int32), jnp.clip(new_at_BQ, 0, F - 1), axis=1)
  queue_BQ = jnp.where(
    j_Q[None] < left_B[:, None], old_BQ, jnp.where(new_at_BQ < lengths_B[:, None], new_BQ, 0)
  )
  out = state.replace(
    queue_BQ=jnp.where(resume_B[:, None], queue_BQ, state.queue_BQ),
    queue_len_B=jnp.where(resume_B, jnp.minimum(left_B + lengths_B, Q), state.queue_len_B),
    queue_pos_B=jnp.where(resume_B, 0, state.queue_pos_B),
    waiting_B=state.waiting_B & ~resume_B,
    stop_reason_B=jnp.where(resume_B, RUNNING, state.stop_reason_B),
    n_new_B=jnp.where(resume_B, 0, state.n_new_B),
    max_new_B=state.max_new_B
    if max_new_B is None
    else jnp.where(resume_B, max_new_B.astype(jnp.int32), state.max_new_B),
  )
  return constrain_state(out)


def finish_arrays(state: DecodeState, finish_B) -> DecodeState:
  """Ends the selected sequences for good (reason ``FINISHED`` unless they already stopped)."""
  reason_B = jnp.where(finish_B & (state.stop_reason_B == RUNNING), FINISHED, state.stop_reason_B)
  return constrain_state(state.replace(done_B=state.done_B | finish_B, stop_reason_B=reason_B))
