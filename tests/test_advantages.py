"""The one advantage module (both loops): z-score and group-centre advantages against hand-computed
numbers and a numpy reference, exact zeros for flat groups, and the informative-group mask of
DAPO dynamic sampling."""

import jax
import numpy as np
import pytest

from spade_jax.rl import advantages as A


def _np_reference(r_GP, keep_GP, mode, eps=1e-8):
  out = np.zeros(r_GP.shape, np.float64)
  for g in range(r_GP.shape[0]):
    vals = r_GP[g][keep_GP[g]].astype(np.float64)
    if vals.size < 2 or vals.max() == vals.min():
      continue
    centred = vals - vals.mean()
    out[g][keep_GP[g]] = centred / (vals.std() + eps) if mode == "zscore" else centred
  return out


def test_zscore_hand_computed():
  returns_GP = np.array([[1, 0, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [0.5, 1, 0.0, 0.0]], np.float32)
  valid_GP = np.array([[True] * 4, [True] * 4, [True] * 4, [True, True, True, False]])
  crashed_GP = np.zeros((4, 4), bool)
  crashed_GP[3, 2] = True
  fn = jax.jit(A.group_advantages, static_argnames="mode")
  adv, keep = fn(returns_GP, valid_GP, crashed_GP)
  s3 = np.sqrt(3.0)  # game 2: mean 0.25, std sqrt(0.1875)
  np.testing.assert_allclose(
    adv,
    [[1, -1, 1, -1], [0, 0, 0, 0], [s3, -1 / s3, -1 / s3, -1 / s3], [-1, 1, 0, 0]],
    rtol=1e-6,
    atol=1e-6,
  )
  assert keep[3].tolist() == [True, True, False, False]  # crashed and pad plays dropped
  assert np.all(np.asarray(adv)[1] == 0.0)  # zero variance -> exactly 0


def test_center_differs_from_zscore_on_a_known_batch():
  """Dr.GRPO keeps the reward scale: ``r - mean`` with no std division."""
  returns_GP = np.array([[1, 0, 1, 0], [1, 0, 0, 0], [0.5, 1.0, 0.0, 0.0]], np.float32)
  valid_GP = np.ones((3, 4), bool)
  z, _ = A.group_advantages(returns_GP, valid_GP, mode="zscore")
  c, keep = jax.jit(A.group_advantages, static_argnames="mode")(returns_GP, valid_GP, mode="center")
  np.testing.assert_allclose(
    c,
    [[0.5, -0.5, 0.5, -0.5], [0.75, -0.25, -0.25, -0.25], [0.125, 0.625, -0.375, -0.375]],
    atol=1e-7,
  )
  np.testing.assert_allclose(z[0], [1, -1, 1, -1], atol=1e-6)
  assert not np.allclose(z, c)
  assert np.asarray(keep).all()
  # the same sign and ranking within each group, only the scale differs
  np.testing.assert_array_equal(np.sign(z), np.sign(c))


@pytest.mark.parametrize("mode", A.MODES)
def test_matches_numpy_reference(mode):
  rng = np.random.default_rng(0)
  r = rng.choice([0.0, 0.25, 0.5, 1.0], size=(7, 6)).astype(np.float32)
  valid = rng.random((7, 6)) > 0.2
  crashed = rng.random((7, 6)) > 0.9
  r[~valid] = 100.0  # pads carry junk that must not leak into any statistic
  r[2] = 0.5  # a zero-variance game
  adv, keep = A.group_advantages(r, valid, crashed, mode=mode)
  np.testing.assert_array_equal(keep, valid & ~crashed)
  np.testing.assert_allclose(adv, _np_reference(r, valid & ~crashed, mode), atol=1e-5)
  assert np.all(np.asarray(adv)[~np.asarray(keep)] == 0.0)


@pytest.mark.parametrize("mode", A.MODES)
def test_zero_variance_is_exact_despite_rounding(mode):
  # 0.1 * 3 / 3 != 0.1 in float32: a naive centring would leak small (z-score: O(1)) advantages
  returns_GP = np.array([[0.1, 0.1, 0.1], [0.7, 0.7, 0.0]], np.float32)
  valid_GP = np.array([[True] * 3, [True, True, False]])
  adv, _ = A.group_advantages(returns_GP, valid_GP, mode=mode)
  assert np.all(np.asarray(adv) == 0.0)
  single, _ = A.group_advantages(np.array([[0.3, 0.9]]), np.array([[True, False]]), mode=mode)
  assert np.all(np.asarray(single) == 0.0)


def test_informative_groups():
  r = np.array([[1, 1, 1], [1, 0, 1], [0.1, 0.1, 0.1], [1, 0, 0], [0.3, 0.3, 0.3]], np.float32)
  keep = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 0, 0], [0, 0, 0]], bool)
  got = jax.jit(A.informative_groups)(r, keep)
  # flat, informative, flat (despite rounding), one kept play, nothing kept
  assert np.asarray(got).tolist() == [False, True, False, False, False]
  adv, _ = A.group_advantages(r, keep)
  np.testing.assert_array_equal(np.any(np.asarray(adv) != 0, axis=1), got)


def test_unknown_mode_is_rejected():
  with pytest.raises(ValueError, match="advantage mode"):
    A.group_advantages(np.zeros((1, 2)), np.ones((1, 2), bool), mode="grpo")
