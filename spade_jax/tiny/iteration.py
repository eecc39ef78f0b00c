"""One fully on-device tiny SPADE iteration: design -> assemble -> play -> rewards -> update.

``iterate(graphdef, state, carry, inputs, spec=..., regen=...)`` is one jitted call:

* **regeneration step** (``regen=True``, ``step % regen_interval == 0``):
  1. the previous pool's designer samples get their rewards from its whole replay window
     (`window.window_stats` + `rewards.designer_rewards`, the SPADE loop's own functions):
     delayed designer training by one regeneration interval;
  2. the policy writes ``attempts`` programs per game (``G * K`` samples in one batch) in the
     designer language (prefill + decode loop under the `GrammarMask` logits processor, so
     every sample is well-formed and ends in budget); `assemble_and_validate` turns them into
     ``EnvProgram`` arrays, runs ``check_program`` and the validator's feasibility check (the
     program's own answer must win on ``feasibility_seeds`` resets); each game takes its
     first valid attempt (`choose_slots`). Rejected samples are never credited and get no
     gradient (exactly like invalid Python in the real path). A game with no valid attempt
     replays (``fallback``) the previous pool's game of its slot if the agent ever won it,
     else a library training program, as the Python loop replays the previous pool or the
     library seed pool when nothing validates; the agent trains on it, the designer is not
     credited. With the ``fixed`` reward the pool is the ``inputs.fixed_programs`` instead
     (no designer sampling at all);
  3. the agent plays each game ``P`` times without and ``H`` times with the hint on matched
     seeds (``envs.rollout.rollout``: the whole multi-turn episode in one ``while_loop``);
* **replay step** (``regen=False``): only unhinted plays of the current pool, recorded at
  offset ``step % regen_interval`` of its window.

Then per-game advantages for the agent (`rl.advantages.group_advantages`), one mixed batch
(``G`` designer rows of the designer's length, when the step trains the designer, and ``G * P``
agent rows of the episode length, as two `Trajectories` segments so neither is padded to the
other's length) and one GRPO step (`rl.update.train_step`). The iteration returns the new
train state and carry plus a small ``outputs`` pytree (metrics and the environment records);
the caller fetches it with one ``jax.device_get`` (the only host sync of the iteration). Two
compilations serve a whole run (`TRACES` counts traces: one per ``regen`` value).

Differences from the Python-environment loop (documented, by design): the ``K`` attempts of a
game are sampled at once from the same prompt (not one after another with fresh prompts), and
the fallback is per slot; the hint is the program's own hint template, so there is no
separate hint-writer call; the designer delay is exactly one regeneration interval; of the
validator's extra checks, feasibility runs on device but the answer-leak check does not
(determinism holds by construction: a program is a pure function of its key).

Symbols: G games, P plays, H hinted plays, W regen interval, T sequence length.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax import trajectories
from spade_jax.engine.decode import prefill, run_loop
from spade_jax.engine.sampling import SamplingParams
from spade_jax.envs.ir.parse import ParseTables
from spade_jax.envs.ir.program import MODE_IMM, OPCODE, EnvProgram
from spade_jax.rl import advantages, losses
from spade_jax.rl.optimizer import OptimizerConfig, learning_rate_schedule, make_optimizer
from spade_jax.rl.train_state import TrainState
from spade_jax.rl.update import train_step
from spade_jax.rollout import device as rollout_lib
from spade_jax.rollout.types import RolloutSpec
from spade_jax.spade import rewards
from spade_jax.spade.window import (
  WindowPlays,
  empty_window,
  record_hint_plays,
  record_plays,
  window_stats,
)
from spade_jax.tiny.grammar import GrammarMask
from spade_jax.tiny.language import (
  INFEASIBLE,
  Language,
  assemble_and_validate,
  first_templates_device,
)

TRACES: collections.Counter = collections.Counter()
SOURCES = ("new", "carried", "library", "none")  # what a pool slot plays (records' "source")
_F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class TinySpec:
  """Static description of the iteration (a jit static argument; hashable)."""

  lang: Language
  rollout: RolloutSpec
  num_games: int
  plays: int
  hint_plays: int
  regen_interval: int
  prompt_len: int  # designer prompt slots (left-padded)
  reward: rewards.DesignerRewardConfig
  loss: losses.LossConfig
  opt: OptimizerConfig
  temperature: float  # designer and agent (the trainer recomputes log-probs at one temperature)
  top_p: float = 1.0
  top_k: int = 0
  agent_turns: int = 4
  agent_new_tokens: int = 12
  reward_scale: float = 1.0
  feasibility_seeds: int = 4  # resets on which a program's own answer must win (0: no check)
  attempts: int = 1  # designer samples per game; the first valid one fills the slot
  fallback: bool = True  # slots with no valid attempt replay a game (never credited)
  reference_plays: int = 0  # plays of each new pool by the frozen reference policy (0: none)
  advantage: str = "zscore"  # the agent's advantages: `rl.advantages.MODES`

  @property
  def design_len(self) -> int:
    """Designer sample slots: prompt + program + the stop token."""
    return self.prompt_len + self.lang.max_tokens + 1

  @property
  def trains_designer(self) -> bool:
    return rewards.trains_designer(self.reward)


@struct.dataclass
class PoolCarry:
  """Device state of the current pool carried between iterations (checkpointed)."""

  programs: EnvProgram  # [G]
  valid_G: jax.Array  # bool: the slot holds a playable game (designed or a fallback)
  designed_G: jax.Array  # bool: the slot's game is this pool's valid designer program
  skill_G: jax.Array  # int32 skill index
  design_tokens_GT: jax.Array  # int32 prompt + program, left-aligned
  design_mask_GT: jax.Array  # float32 1 on sampled program tokens
  design_logprobs_GT: jax.Array  # float32
  has_samples: jax.Array  # [] bool: the pool's designer samples still await training
  window: WindowPlays
  tracker: rewards.LPTracker


@struct.dataclass
class StepInputs:
  """Per-call data prepared on the host (explicitly transferred before the call)."""

  step: jax.Array  # [] int32
  seed: jax.Array  # [] int32 run seed
  prompts_GP: jax.Array  # int32 designer prompts, left-padded with 0
  prompt_valid_GP: jax.Array  # bool
  skill_G: jax.Array  # int32
  fixed_programs: EnvProgram  # [G] pool of the `fixed` variant (ignored otherwise)
  parse: ParseTables


def init_carry(spec: TinySpec, dummy: EnvProgram, num_skills: int) -> PoolCarry:
  """An empty pool: every game invalid, nothing to train, an empty window."""
  G, T = spec.num_games, spec.design_len
  stack = lambda x: jnp.broadcast_to(jnp.asarray(x), (G,) + jnp.shape(x))
  return PoolCarry(
    programs=jax.tree.map(stack, dummy),
    valid_G=jnp.zeros((G,), bool),
    designed_G=jnp.zeros((G,), bool),
    skill_G=jnp.zeros((G,), jnp.int32),
    design_tokens_GT=jnp.zeros((G, T), jnp.int32),
    design_mask_GT=jnp.zeros((G, T), _F32),
    design_logprobs_GT=jnp.zeros((G, T), _F32),
    has_samples=jnp.zeros((), bool),
    window=jax.tree.map(
      jnp.array, empty_window(spec.regen_interval, G, spec.plays, spec.hint_plays)
    ),
    # copies: the carry is donated, so no two leaves may share a buffer
    tracker=jax.tree.map(lambda x: jnp.array(x, copy=True), rewards.LPTracker.create(num_skills)),
  )


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


def _episode_keys(seed, step, games_B, plays_B):
  """Raw PRNG key per episode from (run seed, step, game, play): hinted plays reuse the keys
  of the unhinted plays with the same index (matched problem instances)."""
  base = jax.random.fold_in(jax.random.PRNGKey(seed), step)

  def one(g, p):
    return jax.random.fold_in(jax.random.fold_in(base, g), p)

  return jax.vmap(one)(games_B, plays_B)


def play(
  graphdef,
  params,
  carry_programs,
  inputs: StepInputs,
  key,
  spec: TinySpec,
  hints: bool,
  plays: int | None = None,
):
  """``plays`` (default ``spec.plays``) unhinted (then, with ``hints``, ``spec.hint_plays``
  hinted) plays of every game -> `RolloutOutput`. Play ``p`` of game ``g`` poses the same
  problem instance whoever plays it (hinted or not, policy or reference)."""
  G, H = spec.num_games, spec.hint_plays if hints else 0
  P = spec.plays if plays is None else plays
  games = [g for g in range(G) for _ in range(P)] + [g for g in range(G) for _ in range(H)]
  plays_ = [p for _ in range(G) for p in range(P)] + [h for _ in range(G) for h in range(H)]
  games_B, plays_B = jnp.asarray(games, jnp.int32), jnp.asarray(plays_, jnp.int32)
  hint_B = jnp.arange(len(games)) >= G * P
  B = len(games)
  programs_B = jax.tree.map(lambda x: x[games_B], carry_programs)
  first_G = first_templates_device(spec.lang, carry_programs, spec.rollout)
  rs = spec.rollout
  batch = rollout_lib.RolloutBatch(
    programs=programs_B,
    first=jax.tree.map(lambda x: x[games_B], first_G),
    env_keys_B2=_episode_keys(inputs.seed, inputs.step, games_B, plays_B),
    hint_B=hint_B,
    max_turns_B=jnp.full((B,), spec.agent_turns, jnp.int32),
    max_new_B=jnp.full((B,), spec.agent_new_tokens, jnp.int32),
    sampling=SamplingParams(
      temperature_B=jnp.full((B,), spec.temperature, _F32),
      top_p_B=jnp.full((B,), spec.top_p, _F32),
      top_k_B=jnp.full((B,), spec.top_k, jnp.int32),
      min_p_B=jnp.zeros((B,), _F32),
      greedy_B=jnp.zeros((B,), bool),
    ),
    sync_turns=jnp.zeros((), bool),
    chunked=jnp.asarray(rs.feed_chunk > 0),
    script_BKW=jnp.zeros((B, rs.script_turns, rs.script_width), jnp.int32),
    script_len_BK=jnp.zeros((B, rs.script_turns), jnp.int32),
    oracle_B=jnp.zeros((B,), bool),
    parse=inputs.parse,
  )
  return rollout_lib.rollout(graphdef, params, batch, key, rs)


def _fit(x_BT, T):
  pad = T - x_BT.shape[1]
  return jnp.pad(x_BT, ((0, 0), (0, pad))) if pad > 0 else x_BT[:, :T]


def _trajectories(tokens, mask, logprobs, adv_B, rewards_B, group_B, valid_B, turns_B, role, T):
  B = tokens.shape[0]
  mask = _fit(mask, T) * valid_B[:, None]
  return trajectories.Trajectories(
    tokens_BT=_fit(tokens, T).astype(jnp.int32),
    loss_mask_BT=mask.astype(_F32),
    rollout_logprobs_BT=jnp.where(mask > 0, _fit(logprobs, T), 0.0).astype(_F32),
    advantages_B=jnp.where(valid_B, adv_B, 0.0).astype(_F32),
    role_B=jnp.full((B,), role, jnp.int32),
    rewards_B=rewards_B.astype(_F32),
    group_id_B=group_B.astype(jnp.int32),
    valid_B=valid_B,
    turns_B=turns_B.astype(jnp.int32),
  )


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
    lambda p, f: jnp.where(_rows(carried_G, p), p, f), carry.programs, inputs.fixed_programs
  )
  programs = jax.tree.map(lambda n, o: jnp.where(_rows(designed_G, n), n, o), programs, old)
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


def _mean_or_nan(x, where):
  """Mean of ``x`` over ``where`` (NaN when empty: the host logs no value for that step)."""
  n = jnp.sum(where)
  return jnp.where(n > 0, jnp.sum(jnp.where(where, x, 0.0)) / jnp.maximum(n, 1), jnp.nan)


def _rows(flag_G, x):
  return flag_G.reshape((-1,) + (1,) * (x.ndim - 1))


def _iterate(
  graphdef, state: TrainState, carry: PoolCarry, inputs: StepInputs, spec: TinySpec, regen: bool
):
  TRACES[f"iterate/regen={regen}"] += 1
  G, P, H, W = spec.num_games, spec.plays, spec.hint_plays, spec.regen_interval
  key = jax.random.fold_in(jax.random.PRNGKey(inputs.seed), inputs.step)
  k_design, k_play = jax.random.split(key)
  k_feasible = jax.random.fold_in(key, 7)
  k_ref = jax.random.fold_in(key, 11)
  out = {}

  # 1. delayed designer rewards of the previous pool (its window is complete)
  prev_stats = window_stats(carry.window, spec.reward.win_threshold) if regen else None
  if regen and spec.trains_designer:
    r = rewards.designer_rewards(
      prev_stats,
      carry.skill_G,
      carry.designed_G,
      carry.tracker,
      spec.reward_scale,
      spec.reward,
    )
    trained_G = carry.designed_G & carry.has_samples
    designer_rows = _trajectories(
      carry.design_tokens_GT,
      carry.design_mask_GT,
      carry.design_logprobs_GT,
      r.reward_G,
      r.raw_G,
      jnp.arange(G),
      trained_G,
      jnp.ones((G,), jnp.int32),
      trajectories.ROLE_DESIGNER,
      spec.design_len,
    )
    tracker = jax.tree.map(
      lambda n, o: jnp.where(carry.has_samples, n, o), r.tracker, carry.tracker
    )
    n_trained = jnp.maximum(jnp.sum(trained_G), 1)
    out["prev"] = dict(
      trained_G=trained_G, regret_G=r.regret_G, win_rate_G=r.win_rate_G, reward_G=r.reward_G
    )
    out["designer/regret_mean"] = jnp.sum(jnp.where(trained_G, r.regret_G, 0.0)) / n_trained
    out["designer/reward_mean"] = jnp.sum(jnp.where(trained_G, r.reward_G, 0.0)) / n_trained
    out["designer/pool_win_rate"] = jnp.sum(jnp.where(trained_G, r.win_rate_G, 0.0)) / n_trained
    out["designer/trained_samples"] = jnp.sum(trained_G).astype(_F32)
  else:  # no designer sample to train: the batch holds the agent's rows only
    designer_rows = None
    tracker = carry.tracker

  # 2. a new pool
  if regen:
    if spec.trains_designer:
      pool = new_pool(graphdef, state.params, carry, prev_stats, inputs, k_design, k_feasible, spec)
      programs, designed_G, played_G = pool["programs"], pool["designed_G"], pool["played_G"]
      tokens, mask, logprobs = pool["tokens"], pool["mask"], pool["logprobs"]
      out["records"] = pool["records"]
      out.update(pool["metrics"])
    else:
      programs, played_G = inputs.fixed_programs, jnp.ones((G,), bool)
      designed_G = jnp.zeros((G,), bool)
      tokens = jnp.zeros((G, spec.design_len), jnp.int32)
      mask = logprobs = jnp.zeros((G, spec.design_len), _F32)
    carry = carry.replace(
      programs=programs,
      valid_G=played_G,
      designed_G=designed_G,
      skill_G=inputs.skill_G,
      design_tokens_GT=tokens,
      design_mask_GT=mask,
      design_logprobs_GT=logprobs,
      has_samples=jnp.asarray(spec.trains_designer),
      window=jax.tree.map(jnp.zeros_like, carry.window),
    )
    # the games the difficulty proxies score: the designer's own (fallbacks excluded), or every
    # played game of the fixed pool
    scored_G = carry.designed_G if spec.trains_designer else carry.valid_G
    out["designer/difficulty_bits"] = _mean_or_nan(difficulty_bits(programs), scored_G)
  carry = carry.replace(tracker=tracker)

  # 3. plays
  res = play(graphdef, state.params, carry.programs, inputs, k_play, spec, hints=regen)
  ret_B = rewards.episode_returns(res.reward_B, res.terminated_B)
  crashed_B = res.crashed_B
  ret_GP = ret_B[: G * P].reshape(G, P)
  crashed_GP = crashed_B[: G * P].reshape(G, P)
  valid_GP = carry.valid_G[:, None] & ~crashed_GP
  crashed_G = carry.valid_G & jnp.any(crashed_GP, 1)
  offset = inputs.step % W
  window = record_plays(carry.window, offset, ret_GP, valid_GP, crashed_G)
  n_valid = jnp.maximum(jnp.sum(valid_GP), 1)
  solved_GP = (ret_GP >= 1.0) & valid_GP
  out["agent/solve_rate"] = jnp.sum(solved_GP) / n_valid
  out["agent/return_mean"] = jnp.sum(jnp.where(valid_GP, ret_GP, 0.0)) / n_valid
  out["agent/turns_mean"] = (
    jnp.sum(jnp.where(valid_GP, res.turns_B[: G * P].reshape(G, P), 0)) / n_valid
  )
  out["agent/crash_rate"] = jnp.mean(crashed_GP.astype(_F32))
  out["agent/episodes"] = jnp.sum(valid_GP).astype(_F32)
  out["perf/env_steps"] = jnp.sum(res.turns_B).astype(_F32)
  out["perf/decode_steps"] = res.steps.astype(_F32)
  if regen:
    ret_GH = ret_B[G * P :].reshape(G, H)
    crashed_GH = crashed_B[G * P :].reshape(G, H)
    valid_GH = carry.valid_G[:, None] & ~crashed_GH
    window = record_hint_plays(window, ret_GH, valid_GH, carry.valid_G & jnp.any(crashed_GH, 1))
    n_hint = jnp.maximum(jnp.sum(valid_GH), 1)
    out["agent/solve_rate_hint"] = jnp.sum((ret_GH >= 1.0) & valid_GH) / n_hint
    # the designer's difficulty proxy: unhinted failure rate of the scored games
    scored_GP = scored_G[:, None] & valid_GP
    out["designer/difficulty"] = _mean_or_nan(~solved_GP, scored_GP)
    if spec.reference_plays:
      # the same pool (and the first problem instances) played by the frozen reference policy
      # (the warm-started one): the pool's difficulty against a yardstick that does not learn
      R = spec.reference_plays
      ref = play(graphdef, state.ref_params, carry.programs, inputs, k_ref, spec, False, R)
      ret_GR = rewards.episode_returns(ref.reward_B, ref.terminated_B).reshape(G, R)
      ok_GR = scored_G[:, None] & ~ref.crashed_B.reshape(G, R)
      out["designer/difficulty_ref"] = _mean_or_nan(ret_GR < 1.0, ok_GR)
    out["records"] = dict(
      out.get("records", {}),
      win_G=jnp.sum(solved_GP, 1) / jnp.maximum(jnp.sum(valid_GP, 1), 1),
      hint_win_G=jnp.sum((ret_GH >= 1.0) & valid_GH, 1) / jnp.maximum(jnp.sum(valid_GH, 1), 1),
      bits_G=difficulty_bits(carry.programs),
      valid_G=carry.designed_G if spec.trains_designer else carry.valid_G,
      played_G=carry.valid_G,
    )
  carry = carry.replace(window=window)

  # 4. agent advantages and the update
  adv_GP, keep_GP = advantages.group_advantages(ret_GP, valid_GP, crashed_GP, mode=spec.advantage)
  agent_rows = _trajectories(
    res.tokens_BT[: G * P],
    res.loss_mask_BT[: G * P].astype(_F32),
    res.logprobs_BT[: G * P],
    adv_GP.reshape(-1),
    ret_GP.reshape(-1),
    jnp.repeat(jnp.arange(G), P),
    keep_GP.reshape(-1),
    res.turns_B[: G * P],
    trajectories.ROLE_AGENT,
    spec.rollout.max_context,
  )
  # two segments of their own lengths (`rl.update.loss_and_grads`): the agent's episodes are
  # not padded to the designer's prompt + program length
  batch = (agent_rows,) if designer_rows is None else (designer_rows, agent_rows)
  state, train_metrics = train_step(
    graphdef,
    make_optimizer(spec.opt),
    learning_rate_schedule(spec.opt),
    spec.loss,
    state,
    batch,
  )
  out.update(train_metrics)
  out["train/batch_loss_tokens"] = sum(jnp.sum(b.loss_mask_BT) for b in batch)
  return state, carry, out


@functools.partial(jax.jit, static_argnames=("graphdef", "spec", "regen"), donate_argnums=(1, 2))
def iterate(
  graphdef, state: TrainState, carry: PoolCarry, inputs: StepInputs, *, spec: TinySpec, regen: bool
):
  """One tiny SPADE iteration on device (module docstring). Returns ``(state, carry, outputs)``."""
  return _iterate(graphdef, state, carry, inputs, spec, regen)
