"""Window statistics (win rate, offset-0 regret arms, micro-LP halves) against hand-computed
numbers, eagerly and with traced offsets under jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.spade import window as W
from spade_jax.spade.window import empty_window, record_hint_plays, record_plays

# jitted like every caller does (win_threshold is a static float)
window_stats = jax.jit(W.window_stats, static_argnames=("win_threshold",))

T, F = True, False
# W=4 offsets, G=3 games, P=2 plays, H=2 hinted plays.
RETURNS_WGP = np.array(
  [
    [[1, 0], [1, 1], [0, 0]],
    [[0, 0], [1, 0], [1, 0]],
    [[1, 1], [0, 0], [0, 0]],
    [[1, 0], [0, 0], [1, 1]],
  ],
  np.float32,
)
VALID_WGP = np.array(
  [
    [[T, T], [T, T], [T, T]],
    [[T, T], [T, T], [T, T]],
    [[T, T], [F, F], [F, F]],  # game 1 stops after offset 1; game 2 skips offset 2
    [[T, T], [F, F], [T, T]],
  ]
)
HINT_GH = np.array([[1, 1], [0, 1], [1, 0]], np.float32)
HINT_VALID_GH = np.array([[T, T], [T, F], [T, T]])


def _window():
  win = empty_window(4, 3, 2, 2)
  win = record_hint_plays(win, HINT_GH, HINT_VALID_GH, np.zeros(3, bool))
  for w in range(4):
    win = record_plays(win, w, RETURNS_WGP[w], VALID_WGP[w], np.array([F, F, w == 3]))
  return win


def test_window_stats_hand_computed():
  s = window_stats(_window())
  # game 0: wins 1+0+2+1 of 8; game 1: 3 of 4 (offsets 0-1); game 2: 0+1+2 of 6
  np.testing.assert_allclose(s.win_rate_G, [0.5, 0.75, 0.5], atol=1e-6)
  # regret arms at offset 0 only
  np.testing.assert_allclose(s.return_G, [0.5, 1.0, 0.0], atol=1e-6)
  np.testing.assert_allclose(s.return_hint_G, [1.0, 0.0, 0.5], atol=1e-6)  # game 1: 1 valid
  # micro-LP: game 0 halves {0,1} vs {2,3}: 0.75 - 0.25; game 1 {0} vs {1}: 0.5 - 1;
  # game 2 played offsets {0,1,3}: early {0} = 0, late {3} = 1, middle offset 1 ignored
  np.testing.assert_allclose(s.micro_lp_G, [0.5, -0.5, 1.0], atol=1e-6)
  assert s.played_G.tolist() == [T, T, T]
  assert s.crashed_G.tolist() == [F, F, T]


def test_win_threshold_and_unplayed_games():
  win = empty_window(2, 2, 2, 1)
  win = record_plays(
    win, 0, np.array([[0.5, 1.0], [0.0, 0.0]]), np.array([[T, T], [F, F]]), np.zeros(2, bool)
  )
  s = window_stats(win, win_threshold=1.0)
  np.testing.assert_allclose(s.win_rate_G, [0.5, 0.0])
  s = window_stats(win, win_threshold=0.5)
  np.testing.assert_allclose(s.win_rate_G, [1.0, 0.0])
  assert s.played_G.tolist() == [T, F]
  np.testing.assert_allclose(s.micro_lp_G, [0.0, 0.0])  # one played offset: no halves


def test_record_with_traced_offset_under_jit():
  @jax.jit
  def fill(returns_WGP, valid_WGP):
    win = empty_window(4, 3, 2, 2)
    win = record_hint_plays(win, HINT_GH, HINT_VALID_GH, jnp.zeros(3, bool))

    def body(w, win):
      crashed = jnp.array([False, False, True]) & (w == 3)
      return record_plays(win, w, returns_WGP[w], valid_WGP[w], crashed)

    return window_stats(jax.lax.fori_loop(0, 4, body, win))

  got, want = fill(RETURNS_WGP, VALID_WGP), window_stats(_window())
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_empty_window_validates_shape():
  with pytest.raises(ValueError, match="window shape"):
    empty_window(0, 3, 2, 2)
