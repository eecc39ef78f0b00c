"""`ProgramEnv`: one compiled interpreter for every `EnvProgram`, with the gymnax 1.0 contract.

The program is gymnax's ``params``: ``reset(key, program) -> (obs, state)`` and
``step(key, state, action, program) -> (obs, state, reward, terminated, truncated, info)``
(gymnax's ``step`` auto-resets a finished episode and puts the last observation in
``info["final_observation"]``). `transition` is the same step without the auto-reset, which is
what a multi-turn rollout wants. Observations are `Tokens` (token ids in a fixed
``cfg.obs_len`` buffer plus a length; step feedback uses at most the first
``cfg.feedback_len`` entries, longer feedback is cut and flagged); the action is a parsed answer (`Action`, see
`parse.parse_result`). Everything vmaps over keys, states, actions *and* programs; one
compilation serves any program of the configured sizes.

Code runs pc-driven (`_run`): each iteration executes ``code[pc]``, then ``pc`` becomes a
taken jump's target or ``pc + 1``; the call ends at the section's end (its first nop) or after
``cfg.max_exec`` instructions (``FAULT_CAPACITY``). Under `vmap` each lane has its own pc.
After the reset code, ``program.obs_select`` picks the observation template (``n_obs``).

Step semantics: ``time`` (the ``turn`` register) counts this step; the answer is loaded into
``found/guess/nguess/lguess``; the step code runs; the first case whose predicate is non-zero
gives the feedback text, the reward (thousandths) and whether the episode terminates; it is
truncated when ``turn >= max_turns`` and not terminated. Stepping a finished episode changes
nothing and returns an empty observation and reward 0. Registers persist across steps, so
step code can keep per-episode state (best score so far, remaining guesses ...).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from spade_jax.envs.ir import ops
from spade_jax.envs.ir.parse import select_answer, solution_modes
from spade_jax.envs.ir.program import (
  ANSWER_LIST,
  DEFAULT_CONFIG,
  FAULT_CAPACITY,
  FAULT_INDEX,
  FAULT_NAMES,
  FAULT_REWARD,
  MODE_IMM,
  MODE_NONE,
  REWARD_SCALE,
  SPECIAL_MAXTURNS,
  SPECIAL_NGUESS,
  SPECIAL_TURN,
  TPL_CASE0,
  TPL_HINT,
  TPL_OBS,
  TPL_SOLUTION,
  Action,
  EnvProgram,
  ProgramConfig,
)
from spade_jax.envs.ir.text import Tokens, render


@struct.dataclass
class EnvState:
  regs: jnp.ndarray  # [n_regfile] general registers then the specials
  lists: jnp.ndarray  # [n_listfile, list_len] general lists then lguess
  list_len: jnp.ndarray  # [n_listfile]
  time: jnp.ndarray  # [] steps taken
  terminated: jnp.ndarray  # [] bool
  truncated: jnp.ndarray  # [] bool
  fault: jnp.ndarray  # [] sticky FAULT_* bits
  draws: jnp.ndarray  # [n_draws + list_len] every value drawn this episode, in order
  n_draws: jnp.ndarray  # []
  tape: jnp.ndarray  # [n_draws + list_len] draws to replay instead of sampling
  tape_len: jnp.ndarray  # []


class ProgramEnv(environment.Environment):
  """The interpreter. ``cfg`` fixes all shapes; programs are passed per call."""

  def __init__(self, cfg: ProgramConfig = DEFAULT_CONFIG):
    super().__init__()
    self.cfg = cfg

  @property
  def default_params(self):
    raise TypeError("ProgramEnv has no default program: pass an EnvProgram as params")

  @property
  def name(self) -> str:
    return "ProgramEnv"

  # ---------------------------------------------------------------------------- gymnax API
  def reset_env(self, key, params: EnvProgram):
    return self.reset_with_tape(key, params)

  def step_env(self, key, state: EnvState, action: Action, params: EnvProgram):
    obs, state, reward, terminated, _, info = self.transition(key, state, action, params)
    return obs, state, reward, terminated, info

  def is_truncated(self, state: EnvState, params: EnvProgram):
    return state.truncated

  def is_terminated(self, state: EnvState, params: EnvProgram):
    return state.terminated

  # --------------------------------------------------------------------------- interpreter
  def reset_with_tape(self, key, program: EnvProgram, tape=None, tape_len=None):
    """`reset`, optionally replaying drawn values: ``tape`` [n_draws] (see `draws.py`) is
    used for the first ``tape_len`` draws of the episode instead of sampling."""
    cfg = self.cfg
    program = jax.tree.map(jnp.asarray, program)
    pad = cfg.n_draws + cfg.list_len
    tape_arr = jnp.zeros(pad, jnp.int32)
    if tape is not None:
      tape_arr = tape_arr.at[: cfg.n_draws].set(jnp.asarray(tape, jnp.int32))
    regs = (
      jnp.zeros(cfg.n_regfile, jnp.int32).at[cfg.n_regs + SPECIAL_MAXTURNS].set(program.max_turns)
    )
    state = EnvState(
      regs=regs,
      lists=jnp.zeros((cfg.n_listfile, cfg.list_len), jnp.int32),
      list_len=jnp.zeros(cfg.n_listfile, jnp.int32),
      time=jnp.int32(0),
      terminated=jnp.bool_(False),
      truncated=jnp.bool_(False),
      fault=jnp.int32(0),
      draws=jnp.zeros(pad, jnp.int32),
      n_draws=jnp.int32(0),
      tape=tape_arr,
      tape_len=jnp.int32(0) if tape_len is None else jnp.asarray(tape_len, jnp.int32),
    )
    state = self._run(key, state, program.reset_code, program)
    sel, sel_ok = self.obs_choice(state, program)
    t = jnp.where(sel > 0, TPL_CASE0 + cfg.n_cases + sel - 1, TPL_OBS)
    state = state.replace(fault=state.fault | ~sel_ok * FAULT_INDEX)
    obs, state = self._render(state, t, program)
    return obs, state

  def obs_choice(self, state: EnvState, program: EnvProgram):
    """Which observation template (0 .. n_obs-1) the reset state shows: ``program.obs_select``
    (zeros = template 0); out of range -> (0, False)."""
    cfg = self.cfg
    mode, val = program.obs_select[0], program.obs_select[1]
    sel = jnp.where(mode == MODE_IMM, val, state.regs[jnp.clip(val, 0, cfg.n_regfile - 1)])
    sel = jnp.where(mode == MODE_NONE, 0, sel)
    ok = (sel >= 0) & (sel < cfg.n_obs)
    return jnp.where(ok, sel, 0), ok

  def transition(self, key, state: EnvState, action: Action, program: EnvProgram):
    """One step without auto-reset -> (obs, state, reward, terminated, truncated, info)."""
    cfg = self.cfg
    program = jax.tree.map(jnp.asarray, program)
    done = state.terminated | state.truncated
    turn = state.time + 1
    action = select_answer(action, program.answer_mode)  # the program's answer mode
    found = jnp.asarray(action.found, bool)
    count = jnp.where(found, jnp.asarray(action.count, jnp.int32), 0)
    values = jnp.where(found, jnp.asarray(action.values, jnp.int32), 0)
    specials = jnp.stack(
      [turn, program.max_turns, found.astype(jnp.int32), jnp.where(count > 0, values[0], 0), count]
    )
    regs = state.regs.at[cfg.n_regs + SPECIAL_TURN : cfg.n_regs + SPECIAL_NGUESS + 1].set(specials)
    lguess = jnp.where(jnp.arange(cfg.list_len) < count, values, 0)
    new = state.replace(
      regs=regs,
      lists=state.lists.at[cfg.n_lists].set(lguess),
      list_len=state.list_len.at[cfg.n_lists].set(count),
      time=turn,
    )
    new = self._run(key, new, program.step_code, program)
    # Feedback case: the first used case whose predicate is non-zero.
    operand = lambda mode, val: jnp.where(
      mode == MODE_IMM, val, new.regs[jnp.clip(val, 0, cfg.n_regfile - 1)]
    )
    cases = program.cases
    pred = operand(cases[:, 0], cases[:, 1])
    hit = (jnp.arange(cfg.n_cases) < program.n_cases) & (pred != 0)
    any_hit = jnp.any(hit)
    case = jnp.argmax(hit)
    milli = jnp.where(any_hit, operand(cases[case, 2], cases[case, 3]), 0)
    bad_reward = jnp.abs(milli) > REWARD_SCALE
    milli = jnp.clip(milli, -REWARD_SCALE, REWARD_SCALE)
    terminated = any_hit & (cases[case, 4] == 1)
    truncated = ~terminated & ((turn >= program.max_turns) | (any_hit & (cases[case, 4] == 2)))
    new = new.replace(
      terminated=terminated, truncated=truncated, fault=new.fault | bad_reward * FAULT_REWARD
    )
    obs, new = self._render(new, TPL_CASE0 + case, program, cfg.feedback_len)
    obs = Tokens(obs.ids, jnp.where(any_hit, obs.length, 0))
    reward = milli.astype(jnp.float32) / REWARD_SCALE
    # A finished episode does not move.
    keep = lambda a, b: jnp.where(done, a, b)
    new = jax.tree.map(keep, state, new)
    obs = Tokens(obs.ids, jnp.where(done, 0, obs.length))
    reward = jnp.where(done, 0.0, reward)
    info = {"case": jnp.where(any_hit & ~done, case, -1).astype(jnp.int32), "fault": new.fault}
    return obs, new, reward, new.terminated, new.truncated, info

  def render_hint(self, state: EnvState, program: EnvProgram) -> Tokens:
    return self._render(state, TPL_HINT, jax.tree.map(jnp.asarray, program))[0]

  def render_solution(self, state: EnvState, program: EnvProgram) -> Tokens:
    """``\\boxed{answer}`` as tokens (what an oracle agent would write)."""
    return self._render(state, TPL_SOLUTION, jax.tree.map(jnp.asarray, program))[0]

  def solution_action(self, state: EnvState, program: EnvProgram) -> Action:
    """The program's declared answer as an `Action`."""
    kind, idx = jnp.asarray(program.answer)[0], jnp.asarray(program.answer)[1]
    is_list = kind == ANSWER_LIST
    lidx = jnp.clip(idx, 0, self.cfg.n_listfile - 1)
    scalar = jnp.zeros(self.cfg.list_len, jnp.int32).at[0].set(state.regs[idx])
    count = jnp.where(is_list, state.list_len[lidx], 1)
    values = jnp.where(is_list, state.lists[lidx], scalar)
    return Action(jnp.bool_(True), count, values, *solution_modes(count, values))

  # ------------------------------------------------------------------------------ helpers
  def _render(self, state: EnvState, t, program: EnvProgram, out_len=None):
    tokens, cut = render(program, t, state.regs, state.lists, state.list_len, self.cfg, out_len)
    return tokens, state.replace(fault=state.fault | cut * FAULT_CAPACITY)

  def _run(self, key, state: EnvState, code, program: EnvProgram) -> EnvState:
    cfg = self.cfg
    pad = cfg.n_draws + cfg.list_len
    ctx = ops.Context(
      program.tables,
      program.table_len,
      jax.random.bits(key, (pad,), jnp.uint32),
      state.tape,
      state.tape_len,
    )
    m = ops.Machine(
      state.regs, state.lists, state.list_len, state.fault, state.draws, state.n_draws, jnp.int32(0)
    )
    # Run from pc 0 until pc reaches the first nop (valid programs pad with nops only at the
    # end) or `max_exec` instructions ran; under `vmap` each lane has its own pc and the loop
    # runs as long as the longest-running lane.
    n_code = jnp.sum(code[:, 0] != 0)

    def body(c):
      pc, n_exec, m = c
      ins = code[jnp.clip(pc, 0, code.shape[0] - 1)]
      nxt = ops.next_pc(ins, m.regs, pc, cfg)
      return nxt, n_exec + 1, ops.execute(ins, m, ctx, cfg)

    pc, _, m = jax.lax.while_loop(
      lambda c: (c[0] < n_code) & (c[1] < cfg.max_exec),
      body,
      (jnp.int32(0), jnp.int32(0), m),
    )
    m = m._replace(fault=m.fault | (pc < n_code) * FAULT_CAPACITY)
    return state.replace(
      regs=m.regs,
      lists=m.lists,
      list_len=m.list_len,
      fault=m.fault,
      draws=m.draws,
      n_draws=m.n_draws,
    )


def fault_names(fault: int) -> list[str]:
  """Human-readable names of the bits set in a fault word."""
  return [name for bit, name in FAULT_NAMES.items() if int(fault) & bit]
