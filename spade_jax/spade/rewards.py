"""Designer rewards (regret and its alternatives), the shared reward tail, and agent returns.

Designer reward of game ``g`` (one validated environment of the pool), from the statistics of
its replay window (:mod:`spade_jax.spade.window`), by variant:

* ``regret``:             ``max(0, R_hint - R_no_hint)`` (offset-0 plays, matched seeds).
* ``blend``:              ``0.6 * plateau(win_rate) + 0.4 * clip(regret / 0.15, 0, 1)``.
* ``solve_rate``:         ``plateau(win_rate)``.
* ``learning_potential``: ``|win_rate - mu_slow(skill)|``, per-skill EMA trackers.
* ``micro_lp``:           late-half minus early-half win rate over the replay window.
* ``learnability``:       ``p (1 - p)`` with ``p`` the win rate.
* ``fixed``:              no designer training (all rewards 0; :func:`trains_designer` False).

``plateau(w)`` is 1 on ``[0.4, 0.6]`` and falls linearly to 0 at 0.15 and 0.85. A game whose
step hung or crashed during play scores ``crash_penalty = -0.5`` in every trained variant (the
designer's fault). The tail shared by all variants: centre per skill (subtract the mean raw
reward of the valid games of the same skill, no std division), then multiply by
``scale = min(n_agent / n_designer * regen_interval, 50)``. Games whose generation was invalid
(``valid_G`` False: no environment, so no designer sample to credit) get exactly 0 and take no
part in the skill means.

Agent: episode return = terminal reward clamped to ``[-1, 1]`` if the episode terminated, else
0. The agent's advantages (per-game GRPO z-scores or Dr.GRPO centring) are estimated in
:mod:`spade_jax.rl.advantages`, the one advantage module of both loops.

The numeric core is pure ``jax.numpy`` over fixed shapes with masks (jittable, no host sync), so
the Python-environment loop and the fully on-device loop call the same functions.

Symbols: G games, P plays per game, S skills (:data:`spade_jax.spade.skills.NUM_SKILLS`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax import multihost
from spade_jax.spade.skills import NUM_SKILLS
from spade_jax.spade.window import GameStats, WindowPlays, window_stats

_F32 = jnp.float32

VARIANTS = (
  "regret",
  "blend",
  "solve_rate",
  "learning_potential",
  "micro_lp",
  "learnability",
  "fixed",
)


@dataclasses.dataclass(frozen=True)
class DesignerRewardConfig:
  """Designer reward recipe. Frozen and hashable: pass it as a static argument under ``jit``.

  lp_gamma_fast / lp_gamma_slow: weight of the *newest* observation in each EMA tracker
  (``mu <- (1 - gamma) * mu + gamma * x``), so the fast tracker (0.98) follows the agent almost
  immediately and the slow one (0.85) keeps some history.
  """

  variant: str = "regret"
  crash_penalty: float = -0.5
  win_threshold: float = 1.0
  plateau: tuple[float, float, float, float] = (0.15, 0.4, 0.6, 0.85)
  blend_plateau_weight: float = 0.6
  blend_regret_weight: float = 0.4
  regret_target: float = 0.15
  lp_gamma_fast: float = 0.98
  lp_gamma_slow: float = 0.85
  scale_cap: float = 50.0

  def __post_init__(self):
    if self.variant not in VARIANTS:
      raise ValueError(f"unknown designer reward {self.variant!r}; expected one of {VARIANTS}")
    a, b, c, d = self.plateau
    if not a < b <= c < d:
      raise ValueError(f"plateau={self.plateau} must satisfy lo < top_lo <= top_hi < hi")
    if self.regret_target <= 0:
      raise ValueError(f"regret_target must be > 0, got {self.regret_target}")
    for name in ("lp_gamma_fast", "lp_gamma_slow"):
      if not 0.0 < getattr(self, name) <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1], got {getattr(self, name)}")


def trains_designer(cfg: DesignerRewardConfig) -> bool:
  """False for the ``fixed`` baseline (no designer samples enter the batch)."""
  return cfg.variant != "fixed"


def reward_scale(n_agent: int, n_designer: int, regen_interval: int, cap: float = 50.0) -> float:
  """``min(n_agent / n_designer * regen_interval, cap)``: puts the few designer samples on the
  footing of the many agent samples they generated (= 32 for 192 / 24 * 4)."""
  if n_agent < 0 or n_designer < 1 or regen_interval < 1:
    raise ValueError(
      f"reward_scale needs n_agent >= 0, n_designer >= 1, regen_interval >= 1; got "
      f"({n_agent}, {n_designer}, {regen_interval})"
    )
  return float(min(n_agent / n_designer * regen_interval, cap))


def plateau(win_rate, band=(0.15, 0.4, 0.6, 0.85)):
  """1 on ``[band[1], band[2]]``, linear to 0 at ``band[0]`` and ``band[3]``, 0 outside."""
  a, b, c, d = band
  w = jnp.asarray(win_rate, _F32)
  return jnp.clip(jnp.minimum((w - a) / (b - a), (d - w) / (d - c)), 0.0, 1.0)


def regret(stats: GameStats):
  """Floored hint regret ``max(0, R_hint - R_no_hint)`` ``[G]`` (before the crash penalty)."""
  return jnp.maximum(stats.return_hint_G - stats.return_G, 0.0)


def skill_means(values_G, skill_G, mask_G, num_skills: int = NUM_SKILLS):
  """Per-skill count and mean of ``values_G`` over ``mask_G`` ``([S], [S])``."""
  w_G = jnp.asarray(mask_G, bool).astype(_F32)
  sid_G = jnp.where(mask_G, skill_G, 0).astype(jnp.int32)
  count_S = jax.ops.segment_sum(w_G, sid_G, num_segments=num_skills)
  total_S = jax.ops.segment_sum(w_G * jnp.asarray(values_G, _F32), sid_G, num_segments=num_skills)
  return count_S, total_S / jnp.maximum(count_S, 1.0)


def centre_per_skill(raw_G, skill_G, valid_G, num_skills: int = NUM_SKILLS):
  """``raw - mean_skill(raw)`` over valid games (no std); invalid games get 0."""
  _, mean_S = skill_means(raw_G, skill_G, valid_G, num_skills)
  sid_G = jnp.where(valid_G, skill_G, 0).astype(jnp.int32)
  return jnp.where(valid_G, jnp.asarray(raw_G, _F32) - mean_S[sid_G], 0.0)


@struct.dataclass
class LPTracker:
  """Per-skill EMAs of the agent's win rate for the learning-potential reward (a pytree, updated
  functionally; ``seen_S`` marks skills observed at least once)."""

  mu_fast_S: jax.Array
  mu_slow_S: jax.Array
  seen_S: jax.Array

  @classmethod
  def create(cls, num_skills: int = NUM_SKILLS) -> LPTracker:
    zeros = jnp.zeros((num_skills,), _F32)
    return cls(mu_fast_S=zeros, mu_slow_S=zeros, seen_S=jnp.zeros((num_skills,), bool))

  def to_state(self) -> dict:
    """JSON-serialisable snapshot (host side)."""
    return {
      f.name: multihost.to_host(getattr(self, f.name)).tolist() for f in dataclasses.fields(self)
    }

  @classmethod
  def from_state(cls, state: dict) -> LPTracker:
    return cls(
      mu_fast_S=jnp.asarray(state["mu_fast_S"], _F32),
      mu_slow_S=jnp.asarray(state["mu_slow_S"], _F32),
      seen_S=jnp.asarray(state["seen_S"], bool),
    )


def lp_baseline(tracker: LPTracker, win_rate_G, skill_G, mask_G):
  """``mu_slow`` per skill ``[S]`` before this update; a skill seen for the first time uses its
  current mean win rate (so its first learning potential is the spread around that mean)."""
  count_S, mean_S = skill_means(win_rate_G, skill_G, mask_G, tracker.mu_slow_S.shape[0])
  del count_S
  return jnp.where(tracker.seen_S, tracker.mu_slow_S, mean_S)


def update_lp_tracker(
  tracker: LPTracker, win_rate_G, skill_G, mask_G, gamma_fast: float, gamma_slow: float
) -> LPTracker:
  """Folds this window's per-skill mean win rate into both EMAs; a skill's first observation
  initialises its trackers; skills without masked games keep their values."""
  count_S, mean_S = skill_means(win_rate_G, skill_G, mask_G, tracker.mu_slow_S.shape[0])
  present_S = count_S > 0

  def ema(mu_S, gamma):
    new_S = jnp.where(tracker.seen_S, (1.0 - gamma) * mu_S + gamma * mean_S, mean_S)
    return jnp.where(present_S, new_S, mu_S)

  return LPTracker(
    mu_fast_S=ema(tracker.mu_fast_S, gamma_fast),
    mu_slow_S=ema(tracker.mu_slow_S, gamma_slow),
    seen_S=tracker.seen_S | present_S,
  )


@struct.dataclass
class DesignerRewards:
  reward_G: jax.Array  # final reward per game: centred per skill and scaled; 0 where invalid
  raw_G: jax.Array  # the variant's raw value (after the crash penalty; 0 where invalid)
  regret_G: jax.Array  # floored hint regret, whatever the variant (for metrics and memory)
  win_rate_G: jax.Array
  tracker: LPTracker


def raw_designer_reward(
  stats: GameStats, skill_G, mask_G, tracker: LPTracker, cfg: DesignerRewardConfig
):
  """The variant's raw reward ``[G]`` (no crash penalty, no centring). ``mask_G`` selects the
  games that inform the learning-potential baseline."""
  p_G = stats.win_rate_G
  if cfg.variant == "regret":
    return regret(stats)
  if cfg.variant == "blend":
    bonus_G = jnp.clip(regret(stats) / cfg.regret_target, 0.0, 1.0)
    return cfg.blend_plateau_weight * plateau(p_G, cfg.plateau) + cfg.blend_regret_weight * bonus_G
  if cfg.variant == "solve_rate":
    return plateau(p_G, cfg.plateau)
  if cfg.variant == "learning_potential":
    mu_S = lp_baseline(tracker, p_G, skill_G, mask_G)
    return jnp.abs(p_G - mu_S[skill_G])
  if cfg.variant == "micro_lp":
    return stats.micro_lp_G
  if cfg.variant == "learnability":
    return p_G * (1.0 - p_G)
  return jnp.zeros_like(p_G)  # fixed


def designer_rewards(
  stats: GameStats,
  skill_G,
  valid_G,
  tracker: LPTracker,
  scale,
  cfg: DesignerRewardConfig = DesignerRewardConfig(),
) -> DesignerRewards:
  """Designer rewards of one pool ``[G]``: raw variant value, crash penalty, per-skill centring
  over valid games, times ``scale``. The LP trackers are updated with the win rates of valid,
  non-crashed games that were played (in every variant, so switching variants keeps the
  tracker comparable)."""
  valid_G = jnp.asarray(valid_G, bool)
  skill_G = jnp.asarray(skill_G, jnp.int32)
  informative_G = valid_G & stats.played_G & ~stats.crashed_G
  raw_G = raw_designer_reward(stats, skill_G, informative_G, tracker, cfg)
  if trains_designer(cfg):
    raw_G = jnp.where(stats.crashed_G, cfg.crash_penalty, raw_G)
  raw_G = jnp.where(valid_G, raw_G, 0.0)
  reward_G = centre_per_skill(raw_G, skill_G, valid_G, tracker.mu_slow_S.shape[0]) * scale
  if not trains_designer(cfg):
    reward_G = jnp.zeros_like(reward_G)
  new_tracker = update_lp_tracker(
    tracker, stats.win_rate_G, skill_G, informative_G, cfg.lp_gamma_fast, cfg.lp_gamma_slow
  )
  return DesignerRewards(
    reward_G=reward_G,
    raw_G=raw_G,
    regret_G=jnp.where(valid_G, regret(stats), 0.0),
    win_rate_G=stats.win_rate_G,
    tracker=new_tracker,
  )


@functools.partial(jax.jit, static_argnames=("cfg",))
def designer_rewards_from_window(
  window: WindowPlays,
  skill_G,
  valid_G,
  tracker: LPTracker,
  scale,
  cfg: DesignerRewardConfig = DesignerRewardConfig(),
):
  """:func:`window_stats` then :func:`designer_rewards`, jitted (``cfg`` static)."""
  stats = window_stats(window, cfg.win_threshold)
  return designer_rewards(stats, skill_G, valid_G, tracker, scale, cfg)


def episode_returns(terminal_reward_GP, terminated_GP):
  """Agent episode return: the terminal step reward clamped to ``[-1, 1]`` if the episode
  terminated, else 0 (truncated episodes earn nothing)."""
  r = jnp.clip(jnp.asarray(terminal_reward_GP, _F32), -1.0, 1.0)
  return jnp.where(jnp.asarray(terminated_GP, bool), r, 0.0)
