"""The designer's side of a tiny regeneration step: `design` samples programs under the grammar
mask, `new_pool` assembles and validates them on device and fills each game's slot
(`choose_slots`: first valid attempt, else a replayed or library game), and `difficulty_bits`
measures a pool's task randomness."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax.engine.decode import prefill, run_loop
from spade_jax.engine.sampling import SamplingParams
from spade_jax.envs.ir.program import MODE_IMM, OPCODE, EnvProgram
from spade_jax.tiny.grammar import GrammarMask
from spade_jax.tiny.language import INFEASIBLE, assemble_and_validate
from spade_jax.tiny.spec import PoolCarry, StepInputs, TinySpec

_F32 = jnp.float32


def difficulty_bits(programs: EnvProgram) -> jax.Array:
  """Per program, the bits of randomness of its task: ``sum log2(hi - lo + 1)`` over the reset
  code's ``rand`` draws with immediate bounds (a structural difficulty proxy: how many distinct
  tasks the environment can pose), ``[G]``."""
  code = programs.reset_code  # [G, n_reset, 8] (op, dst, amode, a, bmode, b, cmode, c)
  is_rand = (
    (code[..., 0] == OPCODE["rand"]) & (code[..., 2] == MODE_IMM) & (code[..., 4] == MODE_IMM)
  )
  width = (code[..., 5] - code[..., 3] + 1).astype(_F32)
  return jnp.sum(jnp.where(is_rand & (width >= 1), jnp.log2(jnp.maximum(width, 1.0)), 0.0), -1)


def _pack(valid_BS, *xs_BS):
  """Moves each row's valid slots to the front (left-aligned sequences)."""
  B, S = valid_BS.shape
  dest_BS = jnp.where(valid_BS, jnp.cumsum(valid_BS, axis=1) - 1, S)
  rows = jnp.arange(B)[:, None]
  return tuple(jnp.zeros_like(x).at[rows, dest_BS].set(x, mode="drop") for x in xs_BS)


def design(graphdef, params, prompts_BP, prompt_valid_BP, key, spec: TinySpec):
  """Samples one program per prompt row under the grammar mask -> (packed prompt+program
  tokens, mask, log-probs, program tokens ``[B, max_tokens + 1]``)."""
  B, P = prompts_BP.shape
  processor = GrammarMask(spec.lang)
  pos_BP = jnp.maximum(jnp.cumsum(prompt_valid_BP, axis=1) - 1, 0)
  stop_BS = jnp.broadcast_to(
    jnp.asarray(spec.rollout.stop_ids, jnp.int32), (B, len(spec.rollout.stop_ids))
  )
  state = prefill(
    graphdef,
    params,
    prompts_BP,
    prompt_valid_BP,
    pos_BP,
    jnp.full((B,), P - 1, jnp.int32),
    jnp.full((B,), spec.lang.max_tokens + 1, jnp.int32),
    stop_BS,
    key,
    cache_size=spec.design_len,
    chunk=P,
    queue_size=1,
    processor=processor,
  )
  sampling = SamplingParams(
    temperature_B=jnp.full((B,), spec.temperature, _F32),
    top_p_B=jnp.full((B,), spec.top_p, _F32),
    top_k_B=jnp.full((B,), spec.top_k, jnp.int32),
    min_p_B=jnp.zeros((B,), _F32),
    greedy_B=jnp.zeros((B,), bool),
  )
  state = run_loop(graphdef, params, state, sampling, processor)
  program_BT = jnp.where(state.loss_mask_BS[:, P:], state.tokens_BS[:, P:], 0)
  tokens, mask, logprobs = _pack(
    state.cache.valid_BS, state.tokens_BS, state.loss_mask_BS.astype(_F32), state.logprobs_BS
  )
  return tokens, mask, jnp.where(mask > 0, logprobs, 0.0), program_BT


@struct.dataclass
class Slots:
  """Which game each pool slot plays (`choose_slots`)."""

  row_G: jax.Array  # int32: the designer sample row (g * K + attempt) of the slot
  designed_G: jax.Array  # bool: a valid designer attempt fills the slot
  carried_G: jax.Array  # bool: replays the previous pool's game of the slot
  library_G: jax.Array  # bool: plays the library program of the slot

  @property
  def source_G(self):
    """Index into `SOURCES`."""
    return jnp.where(
      self.designed_G, 0, jnp.where(self.carried_G, 1, jnp.where(self.library_G, 2, 3))
    )


def choose_slots(ok_GK, prev_valid_G, prev_win_G, fallback: bool) -> Slots:
  """First valid attempt of each game; with ``fallback``, a slot without one replays the
  previous pool's game if it was played and the agent won it at least once in its window
  (a pool that became unsolvable is not replayed), else the library program."""
  G, K = ok_GK.shape
  designed_G = jnp.any(ok_GK, axis=1)
  row_G = jnp.arange(G) * K + jnp.argmax(ok_GK, axis=1)  # attempt 0 when none is valid
  carried_G = fallback & ~designed_G & prev_valid_G & (prev_win_G > 0)
  library_G = fallback & ~designed_G & ~carried_G
  return Slots(row_G=row_G, designed_G=designed_G, carried_G=carried_G, library_G=library_G)


def new_pool(
  graphdef, params, carry: PoolCarry, prev_stats, inputs: StepInputs, key, k_feasible, spec
):
  """The designer's new pool: ``attempts`` samples per game (one batch of ``G * K`` rows),
  each assembled and validated on device; a game's slot takes its first valid attempt (the
  Python loop's fresh attempts). With ``fallback``, a slot with no valid attempt replays the
  previous pool's game in that slot if the agent ever won it, else the library program of
  ``inputs.fixed_programs`` (the Python loop replays the previous pool, at the start the
  library seed pool); such games are played and trained on by the agent but never credited
  to the designer. Returns a dict of the pool's arrays, records and metrics."""
  G, K = spec.num_games, spec.attempts
  rep = lambda x: jnp.repeat(x, K, axis=0)  # row g * K + k: attempt k of game g
  tokens, mask, logprobs, program_BT = design(
    graphdef, params, rep(inputs.prompts_GP), rep(inputs.prompt_valid_GP), key, spec
  )
  programs_B, ok_B, reason_B = assemble_and_validate(
    spec.lang, program_BT, k_feasible, spec.feasibility_seeds
  )
  slots = choose_slots(ok_B.reshape(G, K), carry.valid_G, prev_stats.win_rate_G, spec.fallback)
  pick = lambda x: x[slots.row_G]
  designed_G, carried_G, library_G = slots.designed_G, slots.carried_G, slots.library_G
  programs = jax.tree.map(pick, programs_B)
  old = jax.tree.map(
    lambda p, f: jnp.where(rows_of(carried_G, p), p, f), carry.programs, inputs.fixed_programs
  )
  programs = jax.tree.map(lambda n, o: jnp.where(rows_of(designed_G, n), n, o), programs, old)
  played_G = designed_G | carried_G | library_G
  program_GT = pick(program_BT)
  metrics = {
    "designer/valid_rate": jnp.mean(designed_G.astype(_F32)),
    "designer/attempt_valid_rate": jnp.mean(ok_B.astype(_F32)),
    "designer/infeasible_rate": jnp.mean((reason_B == INFEASIBLE).astype(_F32)),
    "designer/program_tokens": jnp.mean(jnp.sum(program_BT != 0, axis=1).astype(_F32)),
    # mean sampling NLL per program token over all attempts: how spread the designer's samples are
    "designer/token_nll": -jnp.sum(logprobs * mask) / jnp.maximum(jnp.sum(mask), 1.0),
    "agent/pool_carried": jnp.mean(carried_G.astype(_F32)),
    "agent/pool_library": jnp.mean(library_G.astype(_F32)),
  }
  records = dict(
    program_GT=program_GT,
    ok_G=designed_G,
    reason_G=pick(reason_B),
    source_G=slots.source_G,
  )
  return dict(
    programs=programs,
    designed_G=designed_G,
    played_G=played_G,
    tokens=pick(tokens),
    mask=pick(mask),
    logprobs=pick(logprobs),
    records=records,
    metrics=metrics,
  )


def rows_of(flag_G, x):
  return flag_G.reshape((-1,) + (1,) * (x.ndim - 1))
