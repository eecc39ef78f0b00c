"""Designer reward variants, the shared tail (crash penalty, per-skill centring, scale), the LP
trackers and episode returns, each against hand-computed numbers, eagerly and under jit (agent
advantages: tests/test_advantages.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.rl.advantages import group_advantages
from spade_jax.spade import rewards as R
from spade_jax.spade.window import GameStats

# Six games: skills 0,0,0,1,1,2; game 2 crashed during play; game 5's generation was invalid.
SKILL_G = np.array([0, 0, 0, 1, 1, 2], np.int32)
VALID_G = np.array([True, True, True, True, True, False])
CRASHED_G = np.array([False, False, True, False, False, False])
WIN_G = np.array([0.5, 0.2, 0.9, 0.7, 0.4, 0.5], np.float32)
STATS = GameStats(
  win_rate_G=WIN_G,
  return_G=WIN_G,  # mean unhinted return at offset 0
  return_hint_G=np.array([0.8, 0.2, 1.0, 0.6, 0.5, 0.9], np.float32),
  micro_lp_G=np.array([0.5, -0.25, 0.0, 0.25, 0.0, 1.0], np.float32),
  played_G=np.ones(6, bool),
  crashed_G=CRASHED_G,
)

# Raw values per variant (crash -> -0.5, invalid -> 0), worked out by hand:
#   regret   = max(0, hint - plain)       = [0.3, 0, (0.1), 0 (-0.1 floored), 0.1, (0.4)]
#   plateau  = [1, 0.2, 0, 0.6, 1, 1];  clip(regret / 0.15) = [1, 0, -, 0, 2/3, -]
#   blend    = 0.6 plateau + 0.4 clip  = [1.0, 0.12, -, 0.36, 0.6 + 0.8/3, -]
#   p(1 - p) = [0.25, 0.16, -, 0.21, 0.24, -]
#   LP (fresh trackers: baseline = skill mean of informative games: 0.35, 0.55)
#            = [0.15, 0.15, -, 0.15, 0.15, -]
RAW = {
  "regret": [0.3, 0.0, -0.5, 0.0, 0.1, 0.0],
  "blend": [1.0, 0.12, -0.5, 0.36, 0.6 + 0.8 / 3, 0.0],
  "solve_rate": [1.0, 0.2, -0.5, 0.6, 1.0, 0.0],
  "learnability": [0.25, 0.16, -0.5, 0.21, 0.24, 0.0],
  "micro_lp": [0.5, -0.25, -0.5, 0.25, 0.0, 0.0],
  "learning_potential": [0.15, 0.15, -0.5, 0.15, 0.15, 0.0],
  "fixed": [0.0] * 6,
}
# After centring per skill over valid games (skill 0: games 0-2, skill 1: games 3-4):
CENTRED = {
  "regret": [0.3 + 0.2 / 3, 0.2 / 3, -0.5 + 0.2 / 3, -0.05, 0.05, 0.0],
  "blend": [1.0 - 0.62 / 3, 0.12 - 0.62 / 3, -0.5 - 0.62 / 3, -0.2533333, 0.2533333, 0.0],
  "solve_rate": [1 - 0.7 / 3, 0.2 - 0.7 / 3, -0.5 - 0.7 / 3, -0.2, 0.2, 0.0],
  "learnability": [0.28, 0.19, -0.47, -0.015, 0.015, 0.0],
  "micro_lp": [0.5 + 0.25 / 3, -0.25 + 0.25 / 3, -0.5 + 0.25 / 3, 0.125, -0.125, 0.0],
  "learning_potential": [0.15 + 0.2 / 3, 0.15 + 0.2 / 3, -0.5 + 0.2 / 3, 0.0, 0.0, 0.0],
  "fixed": [0.0] * 6,
}


def test_plateau_shape():
  w = np.array([0.0, 0.15, 0.275, 0.4, 0.5, 0.6, 0.725, 0.85, 1.0], np.float32)
  np.testing.assert_allclose(R.plateau(w), [0, 0, 0.5, 1, 1, 1, 0.5, 0, 0], atol=1e-6)


def test_reward_scale():
  assert R.reward_scale(192, 24, 4) == 32.0  # the games recipe
  assert R.reward_scale(1000, 10, 4) == 50.0  # capped
  assert R.reward_scale(64, 8, 2, cap=5.0) == 5.0
  assert R.reward_scale(8, 8, 1) == 1.0
  with pytest.raises(ValueError, match="n_designer"):
    R.reward_scale(192, 0, 4)


# The reward core is meant to run jitted; one compiled function per variant serves every test.
designer_rewards = jax.jit(R.designer_rewards, static_argnames=("cfg",))


@pytest.mark.parametrize("variant", R.VARIANTS)
def test_variant_raw_centred_and_scaled(variant):
  cfg = R.DesignerRewardConfig(variant=variant)
  out = designer_rewards(STATS, SKILL_G, VALID_G, R.LPTracker.create(), 1.0, cfg=cfg)
  np.testing.assert_allclose(out.raw_G, RAW[variant], atol=1e-6)
  np.testing.assert_allclose(out.reward_G, CENTRED[variant], atol=1e-6)
  # every valid skill group sums to zero after centring; invalid games get exactly 0
  for s in (0, 1):
    assert abs(float(jnp.sum(out.reward_G[SKILL_G == s]))) < 1e-6
  assert float(out.reward_G[5]) == 0.0
  # the regret diagnostic is reported whatever the variant (0 for the invalid game)
  np.testing.assert_allclose(out.regret_G, [0.3, 0.0, 0.1, 0.0, 0.1, 0.0], atol=1e-6)
  scale = R.reward_scale(192, 24, 4)
  out = designer_rewards(STATS, SKILL_G, VALID_G, R.LPTracker.create(), scale, cfg=cfg)
  np.testing.assert_allclose(out.reward_G, np.array(CENTRED[variant]) * 32.0, atol=1e-5)
  assert R.trains_designer(cfg) == (variant != "fixed")


def test_regret_rewards_spelled_out():
  # the headline case in full: (raw - skill mean) * 32
  cfg = R.DesignerRewardConfig(variant="regret")
  out = designer_rewards(STATS, SKILL_G, VALID_G, R.LPTracker.create(), 32.0, cfg=cfg)
  np.testing.assert_allclose(
    out.reward_G, [11.733333, 2.133333, -13.866667, -1.6, 1.6, 0.0], rtol=1e-5, atol=1e-5
  )


def test_crash_penalty_configurable_and_uncentred_single_game():
  cfg = R.DesignerRewardConfig(variant="regret", crash_penalty=-1.0)
  out = designer_rewards(STATS, SKILL_G, VALID_G, R.LPTracker.create(), 1.0, cfg=cfg)
  assert float(out.raw_G[2]) == -1.0
  # a skill with a single valid game is centred to 0 whatever its raw value
  one = np.array([True, False, False, False, False, False])
  out = designer_rewards(STATS, SKILL_G, one, R.LPTracker.create(), 1.0, cfg=cfg)
  np.testing.assert_allclose(out.reward_G, np.zeros(6), atol=0)


def test_learning_potential_with_history_and_tracker_update():
  cfg = R.DesignerRewardConfig(variant="learning_potential")
  tracker = R.LPTracker(
    mu_fast_S=jnp.array([0.5, 0.5] + [0.0] * 7),
    mu_slow_S=jnp.array([0.6, 0.3] + [0.0] * 7),
    seen_S=jnp.array([True, True] + [False] * 7),
  )
  out = designer_rewards(STATS, SKILL_G, VALID_G, tracker, 1.0, cfg=cfg)
  # |p - mu_slow|: [0.1, 0.4, crash, 0.4, 0.1]; skill 0 mean (0.1 + 0.4 - 0.5) / 3 = 0
  np.testing.assert_allclose(out.raw_G, [0.1, 0.4, -0.5, 0.4, 0.1, 0.0], atol=1e-6)
  np.testing.assert_allclose(out.reward_G, [0.1, 0.4, -0.5, 0.15, -0.15, 0.0], atol=1e-6)
  # trackers fold in the informative games' skill means (0.35, 0.55); skill 2 untouched
  # slow: 0.15 * 0.6 + 0.85 * 0.35 = 0.3875; 0.15 * 0.3 + 0.85 * 0.55 = 0.5125
  # fast: 0.02 * 0.5 + 0.98 * 0.35 = 0.353;  0.02 * 0.5 + 0.98 * 0.55 = 0.549
  t = out.tracker
  np.testing.assert_allclose(t.mu_slow_S[:3], [0.3875, 0.5125, 0.0], atol=1e-6)
  np.testing.assert_allclose(t.mu_fast_S[:3], [0.353, 0.549, 0.0], atol=1e-6)
  assert t.seen_S.tolist()[:3] == [True, True, False]


def test_fresh_tracker_initialises_to_first_observation():
  t = R.update_lp_tracker(R.LPTracker.create(), WIN_G, SKILL_G, VALID_G & ~CRASHED_G, 0.98, 0.85)
  np.testing.assert_allclose(t.mu_slow_S[:3], [0.35, 0.55, 0.0], atol=1e-6)
  np.testing.assert_allclose(t.mu_fast_S[:3], [0.35, 0.55, 0.0], atol=1e-6)
  restored = R.LPTracker.from_state(t.to_state())
  for a, b in zip(jax.tree.leaves(t), jax.tree.leaves(restored)):
    np.testing.assert_array_equal(a, b)


def test_fixed_trains_nothing():
  cfg = R.DesignerRewardConfig(variant="fixed")
  out = designer_rewards(STATS, SKILL_G, VALID_G, R.LPTracker.create(), 32.0, cfg=cfg)
  assert not R.trains_designer(cfg)
  assert np.all(np.asarray(out.reward_G) == 0.0)


def test_config_validation():
  with pytest.raises(ValueError, match="unknown designer reward"):
    R.DesignerRewardConfig(variant="regrets")
  with pytest.raises(ValueError, match="plateau"):
    R.DesignerRewardConfig(plateau=(0.5, 0.4, 0.6, 0.85))
  with pytest.raises(ValueError, match="lp_gamma_slow"):
    R.DesignerRewardConfig(lp_gamma_slow=0.0)


def test_episode_returns_clamp_and_truncation():
  r = R.episode_returns([2.0, -3.0, 0.5, 1.0], [True, True, True, False])
  np.testing.assert_array_equal(r, [1.0, -1.0, 0.5, 0.0])


def test_one_jitted_iteration_without_host_transfers():
  """Window recording, stats, designer rewards and agent advantages in one jitted function,
  with device-resident inputs and implicit transfers disallowed (as the on-device loop needs);
  traced once for two different data sets of the same shape."""
  from spade_jax.spade.window import (
    WindowPlays,
    empty_window,
    record_hint_plays,
    record_plays,
    window_stats,
  )

  traces = []
  cfg = R.DesignerRewardConfig(variant="blend")

  @functools.partial(jax.jit, static_argnames=("cfg",))
  def iteration(plays_WGP, valid_WGP, hint_GH, skill_G, valid_G, tracker, scale, cfg):
    traces.append(1)
    win = empty_window(2, 3, 4, 2)
    win = record_hint_plays(win, hint_GH, jnp.ones_like(hint_GH, bool), jnp.zeros(3, bool))
    for w in range(2):
      win = record_plays(win, w, plays_WGP[w], valid_WGP[w], jnp.zeros(3, bool))
    out = R.designer_rewards(window_stats(win), skill_G, valid_G, tracker, scale, cfg)
    adv, keep = group_advantages(plays_WGP[-1], valid_WGP[-1])
    return out, adv, keep

  rng = np.random.default_rng(1)
  args = lambda: jax.device_put(
    (
      (rng.random((2, 3, 4)) > 0.5).astype(np.float32),
      np.ones((2, 3, 4), bool),
      (rng.random((3, 2)) > 0.3).astype(np.float32),
      np.array([0, 0, 1], np.int32),
      np.array([True, True, True]),
      R.LPTracker.create(),
      np.float32(32.0),
    )
  )
  a1, a2 = args(), args()
  with jax.transfer_guard("disallow"):
    out1, _, _ = iteration(*a1, cfg=cfg)
    out2, adv2, _ = iteration(*a2, cfg=cfg)
  assert len(traces) == 1
  # the same numbers from the window written directly (no record_* calls), via the host path
  plays, valid, hint, skill, vg, tr, scale = jax.device_get(a2)
  win = WindowPlays(plays, valid, hint, np.ones_like(hint, bool), np.zeros(3, bool))
  ref = R.designer_rewards_from_window(win, skill, vg, tr, scale, cfg=cfg)
  np.testing.assert_allclose(out2.reward_G, ref.reward_G, atol=1e-5)
  assert not np.allclose(out1.win_rate_G, out2.win_rate_G)
