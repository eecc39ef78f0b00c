"""The tiny iteration's static spec and device state: `TinySpec` (a jit static argument),
`PoolCarry` (the current pool, carried between iterations and checkpointed) and `StepInputs`
(the host's per-step data), with `init_carry` (an empty pool)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax.envs.ir.parse import ParseTables
from spade_jax.envs.ir.program import EnvProgram
from spade_jax.rl import losses
from spade_jax.rl.optimizer import OptimizerConfig
from spade_jax.rollout.types import RolloutSpec
from spade_jax.spade import rewards
from spade_jax.spade.window import WindowPlays, empty_window
from spade_jax.tiny.language import Language

_F32 = jnp.float32

SOURCES = ("new", "carried", "library", "none")  # what a pool slot plays (records' "source")


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
