"""Generation engine, host side: bucketing, input validation, jitted prefill / decode loop /
feeding, and the ``generate`` convenience function.

The device half (``DecodeState``, the pure step and loop) lives in :mod:`spade_jax.engine.decode`;
sampling and the log-prob convention in :mod:`spade_jax.engine.sampling`. Every jitted function is
module-level and takes the model as ``(graphdef, params)`` with ``graphdef`` static, so two
engines over models of the same structure (or the same engine after a parameter update) share
compiled programs. Prompt lengths and cache sizes are rounded up to shape buckets (powers of
two from ``min_bucket``, or a configured list), so a run compiles a handful of programs; the
count of traces is exposed by :func:`compilation_count` / ``Engine.metrics()``.

Typical multi-turn host loop (the KV cache is kept across turns, nothing is re-prefilled)::

  engine = Engine(model, mesh=mesh)
  state = engine.init(prompts, max_new_tokens=256, cache_size=4096, stop_token_ids=[eot])
  sampling = SamplingParams.make(len(prompts), temperature=0.8)
  state = engine.run(state, sampling)          # until every sequence is done or waiting
  state = engine.feed(state, [0, 2], [obs0, obs2])  # environment tokens, loss mask 0
  state = engine.finish(state, [1])
  state = engine.run(state, sampling)
  out = engine.outputs(state)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax import multihost, sharding
from spade_jax.engine.decode import (
  STOP_REASONS,
  STOP_TOKEN,
  TRACES,
  DecodeState,
  feed_arrays,
  finish_arrays,
  prefill,
  run_loop,
  trace_count,
)
from spade_jax.engine.sampling import LogitsProcessor, SamplingParams

__all__ = ["Engine", "GenerateOutput", "SamplingParams", "compilation_count", "generate"]

_I32_MAX = np.iinfo(np.int32).max


def compilation_count() -> int:
  """Number of times any jitted engine function has been traced in this process."""
  return trace_count()


def _prefill_fn(graphdef, params, *arrays, cache_size, chunk, queue_size, cache_dtype, processor):
  return prefill(
    graphdef,
    params,
    *arrays,
    cache_size=cache_size,
    chunk=chunk,
    queue_size=queue_size,
    cache_dtype=cache_dtype,
    processor=processor,
  )


def _run_fn(graphdef, params, state, sampling, max_steps, processor):
  TRACES["run"] += 1
  return run_loop(graphdef, params, state, sampling, processor, max_steps)


def _feed_fn(state, resume_B, tokens_BF, lengths_B, max_new_B):
  TRACES["feed"] += 1
  return feed_arrays(state, resume_B, tokens_BF, lengths_B, max_new_B)


def _finish_fn(state, finish_B):
  TRACES["finish"] += 1
  return finish_arrays(state, finish_B)


_prefill_jit = jax.jit(
  _prefill_fn,
  static_argnames=("graphdef", "cache_size", "chunk", "queue_size", "cache_dtype", "processor"),
)
_run_jit = jax.jit(_run_fn, static_argnames=("graphdef", "processor"), donate_argnames=("state",))
_feed_jit = jax.jit(_feed_fn, donate_argnames=("state",))
_finish_jit = jax.jit(_finish_fn, donate_argnames=("state",))


@dataclasses.dataclass
class GenerateOutput:
  """Per sequence, everything after the prompt (sampled and forced tokens, in order)."""

  tokens: list[list[int]]
  logprobs: list[list[float]]  # 0.0 at forced tokens
  loss_mask: list[list[int]]  # 1 sampled, 0 forced
  finished: list[bool]  # the last turn ended on a stop token
  stop_reason: list[str]  # running | stop_token | length | cache_full | finished


def _pow2_at_least(n: int) -> int:
  return 1 << max(0, int(n) - 1).bit_length()


def tight_prompt_slots(longest: int, cache_size: int, max_chunk: int) -> tuple[int, int]:
  """``(P, chunk)`` with ``longest <= P < cache_size`` and ``P % chunk == 0``, for a prompt
  whose bucket does not fit the cache: the largest ``chunk <= max_chunk`` that fits, so a
  long prompt is still prefilled in pieces (a ``[chunk, S]`` attention block at a time, never
  ``[longest, S]`` at once: 11 GB for a 22k-token prompt in a 32k cache with 4 heads)."""
  if not 0 < longest < cache_size:
    raise ValueError(f"prompt of length {longest} does not fit a cache of {cache_size} slots")
  for chunk in range(min(max_chunk, longest), 0, -1):
    P = -(-longest // chunk) * chunk
    if P < cache_size:
      return P, chunk
  raise AssertionError("unreachable: chunk 1 always fits")


class Engine:
  """Jitted, optionally sharded sampler over one model (see the module docstring).

  Args:
    model: an NNX ``Transformer`` (split once into ``graphdef`` / ``params``).
    mesh: place parameters and the decode state by the ``spade_jax.sharding`` rules.
    processor: optional :class:`~spade_jax.engine.sampling.LogitsProcessor` (hashable).
    buckets: sorted allowed sizes for prompt slots and cache slots; None: powers of two.
    min_bucket: smallest power-of-two bucket.
    prefill_chunk: prompts longer than this are prefilled in chunks of this many tokens.
    queue_size: capacity of each sequence's forced-token queue.
    cache_dtype: KV cache dtype; "auto" = bfloat16 on accelerators, the model dtype on CPU.
    max_cache_size: largest allowed cache (default: the model's ``max_position``).
  """

  def __init__(
    self,
    model,
    *,
    mesh=None,
    processor: LogitsProcessor | None = None,
    buckets: Sequence[int] | None = None,
    min_bucket: int = 16,
    prefill_chunk: int = 512,
    queue_size: int = 128,
    cache_dtype="auto",
    max_cache_size: int | None = None,
  ):
    self.graphdef, params = nnx.split(model)
    self.cfg = model.cfg
    self.mesh = mesh
    self.processor = processor
    self.buckets = tuple(sorted(int(b) for b in buckets)) if buckets else None
    self.min_bucket = int(min_bucket)
    self.prefill_chunk = int(prefill_chunk)
    self.queue_size = int(queue_size)
    if cache_dtype == "auto":
      cache_dtype = self.cfg.dtype if jax.default_backend() == "cpu" else jnp.bfloat16
    self.cache_dtype = jnp.dtype(cache_dtype)
    self.max_cache_size = int(max_cache_size or self.cfg.max_position)
    self.params = self.place_params(params)

  # ---------------------------------------------------------------------------- helpers
  def place_params(self, params):
    """Puts a parameter pytree (same structure as the model's) into the engine's shardings."""
    if self.mesh is None:
      return params
    return jax.device_put(params, sharding.state_shardings(params, self.mesh))

  def bucket(self, n: int) -> int:
    """The shape bucket for ``n`` slots (configured list first, else a power of two)."""
    if self.buckets:
      for b in self.buckets:
        if b >= n:
          return b
    return max(self.min_bucket, _pow2_at_least(n))

  def metrics(self) -> dict[str, int]:
    return {"generate/compilations": compilation_count()}

  def _mesh_ctx(self):
    return sharding.use_mesh(self.mesh)

  def _check_ids(self, ids: np.ndarray, what: str):
    V = self.cfg.vocab_size
    if ids.size and (ids.min() < 0 or ids.max() >= V):
      bad = ids[(ids < 0) | (ids >= V)][0]
      raise ValueError(f"{what} contains token id {int(bad)} outside the vocabulary [0, {V})")

  def _as_ids(self, seq, what: str) -> np.ndarray:
    arr = np.asarray(seq)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
      raise ValueError(f"{what} must be a flat sequence of integer token ids")
    arr = arr.astype(np.int64)
    self._check_ids(arr, what)
    return arr

  def _per_seq(self, value, batch: int, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != batch):
      raise ValueError(f"{what} must be a scalar or have length {batch}")
    return np.broadcast_to(arr, (batch,)).copy()

  # ---------------------------------------------------------------------------- API
  def init(
    self,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens,
    cache_size: int | None = None,
    stop_token_ids=(),
    seed: int = 0,
    pad_side: str = "left",
    params=None,
  ) -> DecodeState:
    """Validates, pads (``pad_side`` left or right) and prefills ``prompts`` of any lengths.

    ``max_new_tokens`` (int or per sequence) is the sampled-token budget per turn;
    ``cache_size`` defaults to the bucket of ``prompt slots + max_new_tokens`` (give more for a
    multi-turn conversation); ``stop_token_ids`` is one list for all sequences or one list per
    sequence. Raises ValueError before any device work on bad input.
    """
    if isinstance(prompts, np.ndarray) and prompts.ndim == 2:
      prompts = list(prompts)
    if not isinstance(prompts, Sequence) and not isinstance(prompts, np.ndarray):
      raise ValueError("prompts must be a list of token-id lists")
    if len(prompts) == 0:
      raise ValueError("prompts is empty: need at least one prompt")
    ids = [self._as_ids(p, f"prompt {i}") for i, p in enumerate(prompts)]
    for i, p in enumerate(ids):
      if p.size == 0:
        raise ValueError(f"prompt {i} is empty")
    B = len(ids)
    max_new = self._per_seq(max_new_tokens, B, "max_new_tokens")
    if not np.issubdtype(max_new.dtype, np.integer) or np.any(max_new <= 0):
      raise ValueError(f"max_new_tokens must be positive integers, got {max_new.tolist()}")
    if pad_side not in ("left", "right"):
      raise ValueError(f"pad_side must be 'left' or 'right', got {pad_side!r}")
    lens = np.array([p.size for p in ids])
    longest = int(lens.max())
    limit = int(cache_size) if cache_size is not None else self.max_cache_size
    if longest >= limit:
      raise ValueError(
        f"prompt of length {longest} does not fit a cache of {limit} slots "
        "(one slot must stay free for generation)"
      )
    P, chunk = self._prompt_slots(longest)
    if cache_size is None:
      S = min(self.bucket(P + int(max_new.max())), self.max_cache_size)
    else:
      S = int(cache_size)
    if P >= S:  # the bucket does not fit the cache: the tightest chunked layout that does
      P, chunk = tight_prompt_slots(longest, S, self.prefill_chunk)
    room = S - int(max_new.max())
    if P > room >= longest:  # the padded prompt would eat the reply's room: a tighter layout
      P, chunk = tight_prompt_slots(longest, room + 1, self.prefill_chunk)
    stop_BK = self._stop_ids(stop_token_ids, B)

    tokens = np.zeros((B, P), np.int32)
    valid = np.zeros((B, P), bool)
    positions = np.zeros((B, P), np.int32)
    for b, p in enumerate(ids):
      lo = P - p.size if pad_side == "left" else 0
      tokens[b, lo : lo + p.size] = p
      valid[b, lo : lo + p.size] = True
      positions[b, lo : lo + p.size] = np.arange(p.size)
    last = (P - 1) * np.ones(B, np.int32) if pad_side == "left" else (lens - 1).astype(np.int32)
    with self._mesh_ctx():
      return _prefill_jit(
        self.graphdef,
        self.params if params is None else params,
        tokens,
        valid,
        positions,
        last,
        max_new.astype(np.int32),
        stop_BK,
        jax.random.PRNGKey(seed),
        cache_size=S,
        chunk=chunk,
        queue_size=self.queue_size,
        cache_dtype=self.cache_dtype,
        processor=self.processor,
      )

  def _prompt_slots(self, longest: int) -> tuple[int, int]:
    P = self.bucket(longest)
    chunk = min(self.prefill_chunk, P)
    P = -(-P // chunk) * chunk
    return P, chunk

  def _stop_ids(self, stop_token_ids, batch: int) -> np.ndarray:
    lists = list(stop_token_ids) if stop_token_ids is not None else []
    if lists and all(isinstance(x, (list, tuple, np.ndarray)) for x in lists):
      if len(lists) != batch:
        raise ValueError(f"per-sequence stop_token_ids need {batch} lists, got {len(lists)}")
    else:
      lists = [lists] * batch
    arrs = [self._as_ids(list(x), "stop_token_ids") for x in lists]
    K = max(4, _pow2_at_least(max(a.size for a in arrs)))
    out = -np.ones((batch, K), np.int32)
    for b, a in enumerate(arrs):
      out[b, : a.size] = a
    return out

  def run(
    self,
    state: DecodeState,
    sampling: SamplingParams | None = None,
    *,
    max_steps: int | None = None,
    params=None,
  ) -> DecodeState:
    """Decodes until every sequence is done or waiting (or ``max_steps`` more steps).

    ``state`` is donated: use the returned state only. ``sampling`` defaults to temperature
    1; ``params`` overrides the engine's parameters (same structure, e.g. after an update).
    """
    if sampling is None:
      sampling = SamplingParams.make(state.batch)
    if sampling.temperature_B.shape != (state.batch,):
      raise ValueError(
        f"sampling params are for batch {sampling.temperature_B.shape}, "
        f"state has batch {state.batch}"
      )
    steps = _I32_MAX if max_steps is None else int(max_steps)
    if steps < 0:
      raise ValueError(f"max_steps must be >= 0, got {max_steps}")
    with self._mesh_ctx():
      return _run_jit(
        self.graphdef,
        self.params if params is None else params,
        state,
        sampling,
        np.int32(steps),
        processor=self.processor,
      )

  def feed(
    self,
    state: DecodeState,
    seq_ids: Sequence[int],
    tokens: Sequence[Sequence[int]],
    *,
    max_new_tokens=None,
  ) -> DecodeState:
    """Queues forced tokens (e.g. an environment's observation) for the given sequences and
    resumes them; the next :meth:`run` consumes them (loss mask 0) before sampling again."""
    B, Q = state.batch, state.queue_size
    seq_ids = [int(s) for s in seq_ids]
    if len(seq_ids) != len(tokens):
      raise ValueError(f"{len(seq_ids)} sequence ids but {len(tokens)} token lists")
    if len(set(seq_ids)) != len(seq_ids) or any(not 0 <= s < B for s in seq_ids):
      raise ValueError(f"sequence ids must be distinct and in [0, {B}), got {seq_ids}")
    host = multihost.to_host((state.done_B, state.queue_len_B, state.queue_pos_B))
    done, qlen, qpos = (np.asarray(x) for x in host)
    arrs = [self._as_ids(t, f"tokens for sequence {s}") for s, t in zip(seq_ids, tokens)]
    F = max(8, _pow2_at_least(max([a.size for a in arrs], default=1)))
    tok_BF = np.zeros((B, F), np.int32)
    len_B = np.zeros(B, np.int32)
    resume_B = np.zeros(B, bool)
    for s, a in zip(seq_ids, arrs):
      if done[s]:
        raise ValueError(f"sequence {s} is finished and cannot be fed")
      if qlen[s] - qpos[s] + a.size > Q:
        raise ValueError(f"feeding {a.size} tokens to sequence {s} overflows its queue of {Q}")
      tok_BF[s, : a.size] = a
      len_B[s] = a.size
      resume_B[s] = True
    max_new = None
    if max_new_tokens is not None:
      max_new = self._per_seq(max_new_tokens, B, "max_new_tokens").astype(np.int64)
      if np.any(max_new <= 0):
        raise ValueError("max_new_tokens must be positive")
      max_new = max_new.astype(np.int32)
    with self._mesh_ctx():
      return _feed_jit(state, resume_B, tok_BF, len_B, max_new)

  def finish(self, state: DecodeState, seq_ids: Sequence[int]) -> DecodeState:
    """Ends the given sequences (they never decode again)."""
    mask = np.zeros(state.batch, bool)
    for s in seq_ids:
      if not 0 <= int(s) < state.batch:
        raise ValueError(f"sequence id {s} out of range [0, {state.batch})")
      mask[int(s)] = True
    with self._mesh_ctx():
      return _finish_jit(state, mask)

  @staticmethod
  def outputs(state: DecodeState) -> GenerateOutput:
    """Copies each sequence's post-prompt tokens, log-probs and loss mask to the host."""
    tokens, logprobs, mask, valid, reason, P = (
      np.asarray(x)
      for x in multihost.to_host(
        (
          state.tokens_BS,
          state.logprobs_BS,
          state.loss_mask_BS,
          state.cache.valid_BS,
          state.stop_reason_B,
          state.prompt_slots,
        )
      )
    )
    keep = valid.copy()
    keep[:, : int(P)] = False
    return GenerateOutput(
      tokens=[tokens[b][keep[b]].tolist() for b in range(len(keep))],
      logprobs=[logprobs[b][keep[b]].tolist() for b in range(len(keep))],
      loss_mask=[mask[b][keep[b]].astype(int).tolist() for b in range(len(keep))],
      finished=[bool(r == STOP_TOKEN) for r in reason],
      stop_reason=[STOP_REASONS[int(r)] for r in reason],
    )


def generate(
  model,
  prompts: Sequence[Sequence[int]],
  *,
  max_new_tokens,
  temperature=1.0,
  top_p=1.0,
  top_k=0,
  greedy=False,
  stop_token_ids=(),
  seed: int = 0,
  min_p=0.0,
  mesh=None,
  processor: LogitsProcessor | None = None,
  cache_size: int | None = None,
  pad_side: str = "left",
) -> GenerateOutput:
  """Samples up to ``max_new_tokens`` per prompt (docs/DESIGN.md §3.3). Sampling arguments are
  scalars or per-prompt sequences; ``temperature=0`` means greedy. The returned ``tokens``
  include the stop token when one was hit (``finished``)."""
  engine = Engine(model, mesh=mesh, processor=processor)
  n = len(prompts) if hasattr(prompts, "__len__") else 0
  sampling = SamplingParams.make(
    max(n, 1), temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, greedy=greedy
  )
  state = engine.init(
    prompts,
    max_new_tokens=max_new_tokens,
    cache_size=cache_size,
    stop_token_ids=stop_token_ids,
    seed=seed,
    pad_side=pad_side,
  )
  return engine.outputs(engine.run(state, sampling))
