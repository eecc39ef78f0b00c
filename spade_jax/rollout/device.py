"""On-device multi-turn rollout: one jitted ``lax.while_loop`` plays a whole batch of EnvPrograms.

Every episode (an ``EnvProgram``, a seed and a hint flag; the batch is envs x plays x {hint,
no hint}) is reset by the interpreter, its first user message is rendered to token ids and
framed in the chat template (`types.first_templates`), all prompts are prefilled
together, and then one ``while_loop`` runs decode steps. Per sequence a small state machine
runs inside it:

  sampling --(stop token or per-turn budget)--> turn ended: parse the last ``\\boxed{...}`` of
  the turn (the byte automaton of ``parse.py``, fed token by token as they are sampled) ->
  interpreter ``transition`` -> terminated / truncated / turn cap / no room left / fault?
  finish : render the feedback, frame it (``ChatFraming`` turn delta, with the end-of-turn token
  first when the budget cut the turn) and queue it as forced tokens -> sampling ...

Nothing leaves the device until the batch is done. The token stream is the host loop's
(``host.play`` with the same framing, a first message ``preamble + obs [+ "\\n\\nHINT: "
+ hint]`` and the same seeds): tests hold the two equal token for token.

Sizes are static (`RolloutSpec`: program config, cache and prompt slots, framing, chunk
width); programs, seeds, hint flags, turn caps and budgets, sampling parameters, scripts and
the scheduling flags below are data, so any mix of programs and settings runs through one
compilation (`TRACES` counts traces).

Keys. Episode ``i`` with seed ``s`` uses ``PRNGKey(s)`` folded with 0 for ``reset`` and with
``t`` for its ``t``-th step; sampling uses one batch key (``PRNGKey(seed)``), split once per
sampling decode step exactly like ``Engine.run``.

Scheduling (per batch, no recompilation):

* ``sync_turns`` False (default): a sequence whose turn ends is stepped and fed in the same
  loop iteration; no sequence waits for another. True: turns end together once no sequence
  is decoding, as in the host loop.
* ``chunked`` (needs ``spec.feed_chunk > 0``): the prompts are prefilled, and queued feedback
  consumed whenever every decoding sequence is reading feedback, ``feed_chunk`` tokens per
  forward (`spade_jax.engine.chunk`) instead of one token per step. Same tokens; float
  rounding differs slightly. Off, with ``sync_turns``, the decode steps, cache slots, keys and
  numerics are the host loop's exactly, so even sampled episodes match it.
"""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from spade_jax.engine.chunk import chunk_prefill, chunk_step, chunkable
from spade_jax.engine.decode import (
  STOP_TOKEN,
  decode_step,
  decode_weights,
  feed_arrays,
  finish_arrays,
  prefill,
)
from spade_jax.engine.sampling import SamplingParams
from spade_jax.envs.ir import text
from spade_jax.envs.ir.checks import validate_program
from spade_jax.envs.ir.interpreter import EnvState, ProgramEnv
from spade_jax.envs.ir.parse import ParseTables, make_parse_tables, parse_feed, parse_init
from spade_jax.envs.ir.parse import parse_result as parse_action
from spade_jax.envs.ir.program import DEFAULT_CONFIG, EnvProgram, ProgramConfig, stack_programs
from spade_jax.rollout.host import RolloutConfig
from spade_jax.rollout.types import (
  CONTEXT,
  ENV_TRUNCATED,
  FAULT,
  TERMINATED,
  TURN_CAP,
  FirstTemplates,
  RolloutOutput,
  RolloutSpec,
  first_templates,
)

__all__ = ["TRACES", "DeviceRollout", "RolloutBatch", "episode_keys", "rollout"]

TRACES: collections.Counter = collections.Counter()


@struct.dataclass
class RolloutBatch:
  """Per-episode inputs (leading axis B) plus the tokenizer's parse table."""

  programs: EnvProgram
  first: FirstTemplates
  env_keys_B2: jnp.ndarray  # uint32 raw PRNG key per episode (`episode_keys`)
  hint_B: jnp.ndarray  # bool: first message carries the hint
  max_turns_B: jnp.ndarray  # int32 cap on assistant turns (the program's max_turns applies too)
  max_new_B: jnp.ndarray  # int32 sampled tokens per assistant turn
  sampling: SamplingParams
  sync_turns: jnp.ndarray  # [] bool: feed only when no sequence is decoding (host schedule)
  chunked: jnp.ndarray  # [] bool: chunked prefill and feedback (needs spec.feed_chunk > 0)
  script_BKW: jnp.ndarray  # int32 scripted answer tokens per turn (K = spec.script_turns)
  script_len_BK: jnp.ndarray  # int32; 0 = free turn (the model samples)
  oracle_B: jnp.ndarray  # bool: every scripted turn answers with the program's solution
  parse: ParseTables


def episode_keys(seeds) -> np.ndarray:
  """``PRNGKey(seed)`` for each seed in ``[0, 2**32)``, built on the host: ``[B, 2]`` uint32."""
  s = np.asarray(seeds, np.int64).reshape(-1)
  if np.any(s < 0) or np.any(s >= 2**32):
    raise ValueError("episode seeds must be in [0, 2**32)")
  return np.stack([np.zeros_like(s), s], 1).astype(np.uint32)


def _where_B(mask_B, new, old):
  def sel(n, o):
    return jnp.where(mask_B.reshape(mask_B.shape + (1,) * (n.ndim - 1)), n, o)

  return jax.tree.map(sel, new, old)


def _pick(ids: tuple[int, ...], j):
  """``ids[j]`` for an int array ``j`` (clipped; works for an empty tuple)."""
  arr = jnp.asarray(ids if ids else (0,), jnp.int32)
  return arr[jnp.clip(j, 0, arr.shape[0] - 1)]


def _concat(parts, batch: int, width: int):
  """Per-row concatenation of pieces ``(kind, value, length)`` -> ``[B, width]`` ids (0 after
  the end) and the total lengths ``[B]``. ``kind`` "const": a token tuple shared by all rows;
  "ids": a ``[B, N]`` array. Lengths are ints or ``[B]`` arrays."""
  j = jnp.arange(width)[None, :]
  out = jnp.zeros((batch, width), jnp.int32)
  start_B = jnp.zeros((batch,), jnp.int32)
  for kind, value, n in parts:
    n_B = jnp.broadcast_to(jnp.asarray(n, jnp.int32), (batch,))
    k = j - start_B[:, None]
    if kind == "const":
      tok = _pick(value, k)
    else:
      tok = jnp.take_along_axis(value, jnp.clip(k, 0, value.shape[1] - 1), axis=1)
    out = jnp.where((k >= 0) & (k < n_B[:, None]), tok, out)
    start_B = start_B + n_B
  return out, start_B


@struct.dataclass
class _Episodes:
  env: EnvState
  parse: object  # parse.ParseState [B]
  turns_B: jnp.ndarray
  over_B: jnp.ndarray
  reward_B: jnp.ndarray
  terminated_B: jnp.ndarray
  truncated_B: jnp.ndarray
  reason_B: jnp.ndarray
  fault_B: jnp.ndarray


def _rollout(graphdef, params, batch: RolloutBatch, key, spec: RolloutSpec) -> RolloutOutput:
  TRACES["rollout"] += 1
  env = ProgramEnv(spec.program_cfg)
  B = batch.hint_B.shape[0]
  S, P = spec.max_context, spec.prompt_len
  fold = jax.vmap(jax.random.fold_in)
  keys_B2 = batch.env_keys_B2
  _, env_state = jax.vmap(env.reset_env)(fold(keys_B2, jnp.zeros(B, jnp.uint32)), batch.programs)

  def render_first(first, hint, st, program):
    which = hint.astype(jnp.int32) * spec.program_cfg.n_obs + env.obs_choice(st, program)[0]
    return text.render(first, which, st.regs, st.lists, st.list_len, spec.first_cfg)

  content, cut_B = jax.vmap(render_first)(batch.first, batch.hint_B, env_state, batch.programs)
  nfp, nfs = len(spec.first_prefix), len(spec.first_suffix)
  total_B = nfp + content.length + nfs
  # left-padded prompt: position j of the padded row holds prompt token j - (P - total)
  shift_B = P - total_B
  prompt_BP, _ = _concat(
    [
      ("const", (0,), shift_B),
      ("const", spec.first_prefix, nfp),
      ("ids", content.ids, content.length),
      ("const", spec.first_suffix, nfs),
    ],
    B,
    P,
  )
  pos_BP = jnp.arange(P)[None, :] - shift_B[:, None]
  stop_BK = jnp.broadcast_to(jnp.asarray(spec.stop_ids, jnp.int32), (B, len(spec.stop_ids)))
  processor = spec.processor
  args = (prompt_BP, pos_BP >= 0, jnp.maximum(pos_BP, 0))
  kw = dict(
    cache_size=S,
    queue_size=spec.feed_len,
    cache_dtype=jnp.dtype(spec.cache_dtype),
    processor=processor,
  )

  def engine_prefill():  # the host engine's prefill: same slots and numerics as `Engine.init`
    last_B = jnp.full((B,), P - 1, jnp.int32)
    return prefill(
      graphdef, params, *args, last_B, batch.max_new_B, stop_BK, key, chunk=min(P, 512), **kw
    )

  if spec.feed_chunk:
    state = jax.lax.cond(
      batch.chunked,
      lambda: chunk_prefill(
        graphdef, params, *args, batch.max_new_B, stop_BK, key, width=spec.feed_chunk, **kw
      ),
      engine_prefill,
    )
  else:
    state = engine_prefill()
  if processor is not None:
    sol = jax.vmap(env.render_solution)(env_state, batch.programs)
    state = state.replace(proc_state=processor.start(batch, sol))
  crashed0 = env_state.fault != 0
  dead_B = crashed0 | cut_B
  state = finish_arrays(state, dead_B)
  zeros = jnp.zeros((B,), jnp.int32)
  ep = _Episodes(
    env=env_state,
    parse=jax.vmap(lambda _: parse_init(spec.program_cfg.list_len))(zeros),
    turns_B=zeros,
    over_B=dead_B,
    reward_B=jnp.zeros((B,), jnp.float32),
    terminated_B=jnp.zeros((B,), bool),
    truncated_B=cut_B & ~crashed0,
    reason_B=jnp.where(crashed0, FAULT, jnp.where(cut_B, CONTEXT, 0)),
    fault_B=env_state.fault,
  )
  weights = decode_weights(graphdef, params)
  fresh = ep.parse
  stop_K = jnp.asarray(spec.stop_ids, jnp.int32)

  def turn_ends(ep: _Episodes, ended_B, stop_reason_B, index):
    """Steps the environments of the sequences whose turn ended and decides, per sequence,
    finish or feed (returns the feed tokens). Touches no cache: cheap to branch over."""
    action = jax.vmap(parse_action)(ep.parse)
    turns_B = ep.turns_B + ended_B
    step_keys = fold(keys_B2, turns_B.astype(jnp.uint32))
    obs, new_env, r_B, term_B, trunc_B, info = jax.vmap(env.transition)(
      step_keys, ep.env, action, batch.programs
    )
    fault_B = ended_B & (info["fault"] != 0)
    live_B = ended_B & ~fault_B
    term_B = live_B & term_B
    env_trunc_B = live_B & ~term_B & trunc_B
    cap_B = live_B & ~term_B & ~trunc_B & (turns_B >= batch.max_turns_B)
    head_B = (stop_reason_B != STOP_TOKEN).astype(jnp.int32)  # budget cut: close the turn
    fb_BF, fb_len_B = _concat(
      [
        ("const", (spec.turn_end,), head_B),
        ("const", spec.turn_prefix, len(spec.turn_prefix)),
        ("ids", obs.ids, obs.length),
        ("const", spec.turn_suffix, len(spec.turn_suffix)),
      ],
      B,
      spec.feed_len,
    )
    stopped_B = term_B | env_trunc_B | cap_B | fault_B
    no_room_B = ended_B & ~stopped_B & (index + fb_len_B + 1 >= S)
    finish_B = stopped_B | no_room_B
    go_B = ended_B & ~finish_B
    reason_B = jnp.select(
      [term_B, env_trunc_B, cap_B, fault_B, no_room_B],
      [TERMINATED, ENV_TRUNCATED, TURN_CAP, FAULT, CONTEXT],
      ep.reason_B,
    )
    ep = ep.replace(
      env=_where_B(ended_B, new_env, ep.env),
      parse=_where_B(go_B, fresh, ep.parse),
      turns_B=turns_B,
      over_B=ep.over_B | finish_B,
      reward_B=jnp.where(term_B, r_B, ep.reward_B),
      terminated_B=ep.terminated_B | term_B,
      truncated_B=ep.truncated_B | env_trunc_B | cap_B | no_room_B,
      reason_B=reason_B.astype(jnp.int32),
      fault_B=jnp.where(ended_B, info["fault"], ep.fault_B),
    )
    return ep, finish_B, go_B, fb_BF, fb_len_B

  def no_turn_ends(ep: _Episodes, ended_B, stop_reason_B, index):
    none_B = jnp.zeros((B,), bool)
    return ep, none_B, none_B, jnp.zeros((B, spec.feed_len), jnp.int32), jnp.zeros((B,), jnp.int32)

  def body(carry):
    state, ep = carry
    slot = state.cache.index  # < S: the loop only runs while some sequence can decode
    sampled_B = state.active_B() & (state.queue_pos_B >= state.queue_len_B)
    if spec.feed_chunk:  # every active sequence is reading feedback: take it in one chunk
      state = jax.lax.cond(
        batch.chunked & chunkable(state, spec.feed_chunk),
        lambda s: chunk_step(graphdef, params, s, spec.feed_chunk, processor, weights),
        lambda s: decode_step(
          graphdef, params, s, batch.sampling, processor, weights, skip_idle=False
        ),
        state,
      )
    else:
      state = decode_step(
        graphdef, params, state, batch.sampling, processor, weights, skip_idle=False
      )
    tok_B = jax.lax.dynamic_slice_in_dim(state.tokens_BS, slot, 1, axis=1)[:, 0]
    into_parse_B = sampled_B & ~jnp.any(tok_B[:, None] == stop_K[None, :], axis=1)
    parsed = jax.vmap(parse_feed, (0, 0, None))(ep.parse, tok_B, batch.parse)
    ep = ep.replace(parse=_where_B(into_parse_B, parsed, ep.parse))
    # a full cache ended these sequences in mid-turn: the turn counts, the env is not stepped
    cut_B = ~ep.over_B & state.done_B & ~state.waiting_B
    ep = ep.replace(
      turns_B=ep.turns_B + cut_B,
      over_B=ep.over_B | cut_B,
      truncated_B=ep.truncated_B | cut_B,
      reason_B=jnp.where(cut_B, CONTEXT, ep.reason_B),
    )
    ended_B = ~ep.over_B & state.waiting_B
    ended_B &= ~(batch.sync_turns & jnp.any(state.active_B()))
    ep, finish_B, go_B, fb_BF, fb_len_B = jax.lax.cond(
      jnp.any(ended_B),
      turn_ends,
      no_turn_ends,
      ep,
      ended_B,
      state.stop_reason_B,
      state.cache.index,
    )
    state = feed_arrays(finish_arrays(state, finish_B), go_B, fb_BF, fb_len_B)
    return state, ep

  # Each iteration decodes one step (one cache slot) and then ends the turns that ended. When
  # no sequence can decode any more, every episode is over (a waiting sequence is only left
  # unhandled in sync mode while another one decodes), so the loop ends.
  state, ep = jax.lax.while_loop(lambda c: jnp.any(c[0].active_B()), body, (state, ep))
  return RolloutOutput.pack(state, ep, total_B)


@functools.partial(jax.jit, static_argnames=("graphdef", "spec"))
def rollout(graphdef, params, batch: RolloutBatch, key, spec: RolloutSpec) -> RolloutOutput:
  """Plays every episode of ``batch`` to its end in one jitted call (see the module docstring).

  ``graphdef``/``params``: ``nnx.split`` of the policy; ``key``: raw ``uint32[2]`` sampling
  key (``jax.random.PRNGKey(seed)``); ``spec``: static sizes. Returns device arrays.
  """
  return _rollout(graphdef, params, batch, key, spec)


class DeviceRollout:
  """Host front end: tokenizer, framing, spec, parse table and per-program template cache.

  ``DeviceRollout(model, tok, framing, cfg)(programs, seeds, hint_flags, seed=0)`` plays one
  episode per entry (``programs[i]`` with ``seeds[i]``, hinted where ``hint_flags[i]``) and
  returns a `RolloutOutput` (``.episodes(tok, framing)`` -> ``host.EpisodeResult``,
  ``.to_trajectories(...)``). ``cfg`` is the host loop's ``RolloutConfig``: ``max_context``
  is a static size, the other fields are data (a call may pass another ``cfg`` with the same
  ``max_context`` without recompiling).
  """

  def __init__(
    self,
    model,
    tok,
    framing,
    cfg: RolloutConfig,
    *,
    program_cfg: ProgramConfig = DEFAULT_CONFIG,
    prompt_len: int = 256,
    preamble: str = "",
    script_turns: int = 0,
    script_width: int = 64,
    feed_chunk: int = 16,
    cache_dtype="auto",
  ):
    self.graphdef, self.params = nnx.split(model)
    self.tok, self.framing, self.cfg = tok, framing, cfg
    if cache_dtype == "auto":
      cache_dtype = model.cfg.dtype if jax.default_backend() == "cpu" else jnp.bfloat16
    self.spec = RolloutSpec.make(
      tok,
      framing,
      max_context=cfg.max_context,
      program_cfg=program_cfg,
      prompt_len=prompt_len,
      preamble=preamble,
      script_turns=script_turns,
      script_width=script_width,
      feed_chunk=feed_chunk,
      cache_dtype=cache_dtype,
    )
    self.tables = make_parse_tables(tok.token_bytes)
    self._first: dict[bytes, FirstTemplates] = {}

  def first_templates(self, program: EnvProgram) -> FirstTemplates:
    """Validated, compiled first-message templates of ``program`` (cached by content)."""
    host = jax.tree.map(np.asarray, program)
    key = b"".join(np.ascontiguousarray(x).tobytes() for x in jax.tree.leaves(host))
    if key not in self._first:
      validate_program(host, self.spec.program_cfg, self.tok.vocab_size)
      self._first[key] = first_templates(host, self.tok, self.spec)
    return self._first[key]

  def batch(
    self,
    programs,
    seeds,
    hint_flags,
    *,
    cfg=None,
    sync_turns=False,
    chunked=True,
    scripts=None,
    oracle=False,
  ) -> RolloutBatch:
    """Host-side inputs for `rollout`. ``scripts[i][k]``: token ids episode ``i`` writes in
    turn ``k`` (then the end-of-turn token; empty: a free turn); ``oracle``: scripted turns
    answer with the program's own solution (a bool or one per episode). Both need
    ``script_turns > 0``. ``sync_turns`` / ``chunked``: scheduling (module docstring);
    ``cfg`` overrides the constructor's ``RolloutConfig`` (same ``max_context``)."""
    B = len(programs)
    if len(seeds) != B or len(hint_flags) != B:
      raise ValueError(f"{B} programs but {len(seeds)} seeds, {len(hint_flags)} hint flags")
    cfg = self.cfg if cfg is None else cfg
    if cfg.max_context != self.spec.max_context:
      raise ValueError(f"cfg.max_context {cfg.max_context} != {self.spec.max_context} (static)")
    if cfg.max_turns < 1 or cfg.max_new_tokens < 1:
      raise ValueError("max_turns and max_new_tokens must be positive")
    K, W = self.spec.script_turns, self.spec.script_width
    if (scripts is not None or np.any(oracle)) and not K:
      raise ValueError("scripts / oracle need script_turns > 0")
    script = np.zeros((B, K, W), np.int32)
    script_len = np.zeros((B, K), np.int32)
    for i, turns in enumerate(scripts or []):
      for k, ids in enumerate(list(turns)[:K]):
        if len(ids) > W:
          raise ValueError(f"script {i} turn {k}: {len(ids)} tokens > script_width {W}")
        script[i, k, : len(ids)] = ids
        script_len[i, k] = len(ids)
    firsts = [self.first_templates(p) for p in programs]
    return RolloutBatch(
      programs=stack_programs(list(programs)),
      first=jax.tree.map(lambda *xs: np.stack(xs), *firsts),
      env_keys_B2=episode_keys(seeds),
      hint_B=np.asarray(hint_flags, bool),
      max_turns_B=np.full((B,), cfg.max_turns, np.int32),
      max_new_B=np.full((B,), cfg.max_new_tokens, np.int32),
      sampling=SamplingParams.make(
        B, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, greedy=cfg.greedy
      ),
      sync_turns=np.asarray(sync_turns, bool),
      chunked=np.asarray(chunked and self.spec.feed_chunk > 0, bool),
      script_BKW=script,
      script_len_BK=script_len,
      oracle_B=np.broadcast_to(np.asarray(oracle, bool), (B,)).copy(),
      parse=self.tables,
    )

  def __call__(self, programs, seeds, hint_flags, *, seed: int = 0, params=None, **kw):
    """Plays the batch (keywords as in `batch`) -> `RolloutOutput` of device arrays."""
    batch = self.batch(programs, seeds, hint_flags, **kw)
    params = self.params if params is None else params
    return rollout(self.graphdef, params, batch, jax.random.PRNGKey(seed), self.spec)
