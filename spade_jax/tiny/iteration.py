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
     first valid attempt (`pool.choose_slots`). Rejected samples are never credited and get no
     gradient (exactly like invalid Python in the real path). A game with no valid attempt
     replays (``fallback``) the previous pool's game of its slot if the agent ever won it,
     else a library training program, as the Python loop replays the previous pool or the
     library seed pool when nothing validates; the agent trains on it, the designer is not
     credited. With the ``fixed`` reward the pool is the ``inputs.fixed_programs`` instead
     (no designer sampling at all);
  3. the agent plays each game ``P`` times without and ``H`` times with the hint on matched
     seeds (``rollout.device.rollout``: the whole multi-turn episode in one ``while_loop``);
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
import functools

import jax
import jax.numpy as jnp

from spade_jax import trajectories
from spade_jax.engine.sampling import SamplingParams
from spade_jax.rl import advantages
from spade_jax.rl.optimizer import learning_rate_schedule, make_optimizer
from spade_jax.rl.train_state import TrainState
from spade_jax.rl.update import train_step
from spade_jax.rollout import device as rollout_lib
from spade_jax.spade import rewards
from spade_jax.spade.window import record_hint_plays, record_plays, window_stats
from spade_jax.tiny.language import first_templates_device
from spade_jax.tiny.pool import difficulty_bits, new_pool
from spade_jax.tiny.spec import (  # noqa: F401 (SOURCES, init_carry: re-exported)
  SOURCES,
  PoolCarry,
  StepInputs,
  TinySpec,
  init_carry,
)

TRACES: collections.Counter = collections.Counter()
_F32 = jnp.float32


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


def _mean_or_nan(x, where):
  """Mean of ``x`` over ``where`` (NaN when empty: the host logs no value for that step)."""
  n = jnp.sum(where)
  return jnp.where(n > 0, jnp.sum(jnp.where(where, x, 0.0)) / jnp.maximum(n, 1), jnp.nan)


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
