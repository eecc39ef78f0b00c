"""Delayed designer training: samples from regeneration step K are rewarded from their pool's
whole window and trained at K + delay; the final epoch is flushed; JSON resume is exact."""

import json

import numpy as np
import pytest

from spade_jax.spade.delayed import DelayedDesignerBuffer, validate_delay
from spade_jax.spade.rewards import DesignerRewardConfig, LPTracker

MATH, LOGIC = "Mathematical Reasoning", "Logical Deduction"
T, F = True, False
NO_CRASH = np.zeros(2, bool)
ALL2 = np.ones((2, 2), bool)


def test_validate_delay():
  assert validate_delay(4, 4) == 4
  assert validate_delay(8, 4) == 8
  for bad in (0, -4, 2, 6):
    with pytest.raises(ValueError, match="positive multiple of regen_interval=4"):
      validate_delay(bad, 4)
  with pytest.raises(ValueError, match="positive multiple"):
    DelayedDesignerBuffer(regen_interval=2, num_games=2, plays=2, hint_plays=1, delay=3)


def _play_epoch0(buf):
  """Pool of step 0 (regen_interval 2): two games of the same skill."""
  samples = [{"game": 0, "tokens": [5, 6]}, {"game": -1, "tokens": [7]}, {"game": 1, "tokens": [8]}]
  buf.open_epoch(0, [MATH, MATH], samples)
  buf.record_hint_plays(0, np.array([[1.0], [0.0]]), np.ones((2, 1), bool), NO_CRASH)
  buf.record_plays(0, np.array([[0.0, 1.0], [0.0, 0.0]]), ALL2, NO_CRASH)
  buf.record_plays(1, np.array([[1.0, 1.0], [0.0, 1.0]]), ALL2, NO_CRASH)


def test_rewards_recomputed_from_the_whole_window_and_trained_one_interval_later():
  buf = DelayedDesignerBuffer(regen_interval=2, num_games=2, plays=2, hint_plays=1)
  _play_epoch0(buf)
  assert buf.pop_due(1) == []  # still inside the window
  buf.open_epoch(2, [LOGIC, MATH], [{"game": 0}, {"game": 1}])
  buf.record_plays(2, np.array([[1.0, 1.0], [1.0, 1.0]]), ALL2, NO_CRASH)
  (due,) = buf.pop_due(2)
  assert due.gen_step == 0 and buf.pending_steps == (2,)
  assert due.valid_G.tolist() == [T, T]

  # regret arm at offset 0: game 0 hint 1 - plain 0.5 = 0.5 (using the whole window would give
  # 1 - 0.75 = 0.25); game 1: 0 - 0 = 0. Same skill: centred [0.25, -0.25], times scale 4.
  out = due.rewards(LPTracker.create(), 4.0, DesignerRewardConfig(variant="regret"))
  np.testing.assert_allclose(out.regret_G, [0.5, 0.0], atol=1e-6)
  np.testing.assert_allclose(out.reward_G, [1.0, -1.0], atol=1e-6)
  # win rates over all window plays: game 0 3/4, game 1 1/4
  np.testing.assert_allclose(out.win_rate_G, [0.75, 0.25], atol=1e-6)
  assert due.sample_rewards(out.reward_G) == pytest.approx([1.0, 0.0, -1.0])

  # solve_rate uses the window's win rate: plateau(0.75) = 0.4, plateau(0.25) = 0.4 -> centred 0
  out = due.rewards(LPTracker.create(), 1.0, DesignerRewardConfig(variant="solve_rate"))
  np.testing.assert_allclose(out.raw_G, [0.4, 0.4], atol=1e-6)
  # micro-LP: early offset 0 vs late offset 1: game 0 1.0 - 0.5, game 1 0.5 - 0.0
  out = due.rewards(LPTracker.create(), 1.0, DesignerRewardConfig(variant="micro_lp"))
  np.testing.assert_allclose(out.raw_G, [0.5, 0.5], atol=1e-6)


def test_final_epoch_flushed_with_partial_window():
  buf = DelayedDesignerBuffer(regen_interval=2, num_games=2, plays=2, hint_plays=1)
  _play_epoch0(buf)
  buf.open_epoch(2, [MATH, MATH], [{"game": 0}])
  buf.record_hint_plays(2, np.array([[1.0], [1.0]]), np.ones((2, 1), bool), NO_CRASH)
  buf.record_plays(2, np.array([[0.0, 0.0], [1.0, 0.0]]), ALL2, NO_CRASH)
  assert [e.gen_step for e in buf.pop_due(2)] == [0]
  # training ends after step 2: the last epoch is due at 4 but must not be lost
  assert buf.pop_due(3) == []
  (last,) = buf.flush()
  assert last.gen_step == 2 and buf.pending_steps == ()
  assert last.valid_G.tolist() == [T, F]  # no sample claimed game 1
  out = last.rewards(LPTracker.create(), 1.0, DesignerRewardConfig(variant="regret"))
  np.testing.assert_allclose(out.regret_G, [1.0, 0.0], atol=1e-6)  # game 1 invalid -> 0
  np.testing.assert_allclose(out.reward_G, [0.0, 0.0], atol=1e-6)  # alone in its skill
  with pytest.raises(ValueError, match="no designer epoch is open"):
    buf.record_plays(3, np.zeros((2, 2)), ALL2, NO_CRASH)


def test_longer_delay_and_crash_flags():
  buf = DelayedDesignerBuffer(regen_interval=2, num_games=2, plays=2, hint_plays=1, delay=4)
  _play_epoch0(buf)
  buf.open_epoch(2, [MATH, MATH], [{"game": 0}, {"game": 1}])
  buf.record_plays(2, np.zeros((2, 2)), np.array([[T, T], [F, T]]), np.array([F, T]))
  assert buf.pop_due(2) == [] and buf.pop_due(3) == []
  buf.open_epoch(4, [MATH, MATH], [])
  due = buf.pop_due(4)
  assert [e.gen_step for e in due] == [0]
  (ep2,) = buf.pop_due(6)
  assert ep2.window.crashed_G.tolist() == [F, T]
  out = ep2.rewards(LPTracker.create(), 1.0, DesignerRewardConfig(variant="blend"))
  assert float(out.raw_G[1]) == -0.5


def test_window_and_order_errors():
  buf = DelayedDesignerBuffer(regen_interval=2, num_games=2, plays=2, hint_plays=1)
  with pytest.raises(ValueError, match="no designer epoch is open"):
    buf.record_plays(0, np.zeros((2, 2)), ALL2, NO_CRASH)
  _play_epoch0(buf)
  with pytest.raises(ValueError, match="outside the window"):
    buf.record_plays(2, np.zeros((2, 2)), ALL2, NO_CRASH)
  with pytest.raises(ValueError, match="offset 0"):
    buf.record_hint_plays(1, np.zeros((2, 1)), np.ones((2, 1), bool), NO_CRASH)
  with pytest.raises(ValueError, match="opened after"):
    buf.open_epoch(0, [MATH, MATH], [])
  with pytest.raises(ValueError, match="expected 2 skills"):
    buf.open_epoch(2, [MATH], [])
  with pytest.raises(ValueError, match="outside"):
    buf.open_epoch(2, [MATH, MATH], [{"game": 2}])
  with pytest.raises(ValueError, match="unknown skill"):
    buf.open_epoch(2, [MATH, "Juggling"], [])


def test_json_resume_is_exact():
  def run(buf, steps):
    out = []
    for step in steps:
      if step % 2 == 0:
        buf.open_epoch(step, [MATH, LOGIC], [{"game": 0, "lp": [-0.1]}, {"game": 1, "lp": [0.3]}])
        buf.record_hint_plays(step, np.full((2, 1), 0.7), np.ones((2, 1), bool), NO_CRASH)
      rng = np.random.default_rng(step)
      buf.record_plays(
        step, rng.random((2, 2)).astype(np.float32), rng.random((2, 2)) > 0.3, NO_CRASH
      )
      out += buf.pop_due(step)
    return out

  ref_buf = DelayedDesignerBuffer(regen_interval=2, num_games=2, plays=2, hint_plays=1)
  ref = run(ref_buf, range(7)) + ref_buf.flush()

  buf = DelayedDesignerBuffer(regen_interval=2, num_games=2, plays=2, hint_plays=1)
  got = run(buf, range(3))
  state = json.loads(json.dumps(buf.to_state()))
  buf = DelayedDesignerBuffer.from_state(state)
  got += run(buf, range(3, 7)) + buf.flush()

  assert [e.gen_step for e in got] == [e.gen_step for e in ref] == [0, 2, 4, 6]
  for a, b in zip(got, ref):
    assert a.samples == b.samples and a.skills == b.skills
    for k in ("returns_WGP", "valid_WGP", "hint_returns_GH", "hint_valid_GH", "crashed_G"):
      np.testing.assert_array_equal(getattr(a.window, k), getattr(b.window, k))
      assert np.asarray(getattr(a.window, k)).dtype == np.asarray(getattr(b.window, k)).dtype
    ra = a.rewards(LPTracker.create(), 32.0, DesignerRewardConfig(variant="blend"))
    rb = b.rewards(LPTracker.create(), 32.0, DesignerRewardConfig(variant="blend"))
    np.testing.assert_array_equal(ra.reward_G, rb.reward_G)
