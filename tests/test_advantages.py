"""Advantage estimators vs numpy references; roles are normalised separately; pads ignored."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax import trajectories as tj
from spade_jax.rl import advantages as adv
from spade_jax.trajectories import ROLE_AGENT, ROLE_DESIGNER


def _np_zscore(r, gid, valid, eps=1e-8):
  out = np.zeros_like(r, dtype=np.float64)
  for g in np.unique(gid[valid]):
    sel = valid & (gid == g)
    vals = r[sel].astype(np.float64)
    out[sel] = (vals - vals.mean()) / (vals.std() + eps)  # population std
  return out


def _data(seed=0, n=24, groups=5):
  rng = np.random.default_rng(seed)
  r = rng.choice([0.0, 0.5, 1.0], n).astype(np.float32)
  gid = rng.integers(0, groups, n).astype(np.int32)
  valid = rng.random(n) < 0.85
  r[~valid] = 100.0  # pads carry junk that must not leak into any statistic
  return r, gid, valid


def test_group_zscore_matches_numpy():
  r, gid, valid = _data()
  r[(gid == 2) & valid] = 0.5  # a zero-variance group
  got = jax.jit(adv.group_zscore, static_argnums=3)(r, gid, valid, 5)
  want = _np_zscore(r, gid, valid)
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert np.all(np.asarray(got)[(gid == 2) & valid] == 0.0)
  assert np.all(np.asarray(got)[~valid] == 0.0)


def test_group_center_matches_numpy():
  r, gid, valid = _data(1)
  got = adv.group_center(jnp.asarray(r), gid, valid, 5)
  want = np.zeros_like(r)
  for g in range(5):
    sel = valid & (gid == g)
    if sel.any():
      want[sel] = r[sel] - r[sel].mean()
  np.testing.assert_allclose(got, want, atol=1e-6)


def test_roles_are_normalised_separately():
  """The same group id in the two roles are two different groups; designer rewards pass
  through untouched by default."""
  r_agent = np.array([0, 1, 1, 1, 0, 0], np.float32)
  r_design = np.array([3.0, -1.0, 0.25], np.float32)
  rewards = np.concatenate([r_design, r_agent])
  role = np.array([ROLE_DESIGNER] * 3 + [ROLE_AGENT] * 6, np.int32)
  gid = np.array([0, 0, 1, 0, 0, 0, 1, 1, 1], np.int32)
  valid = np.ones(9, bool)
  got = np.asarray(adv.compute_advantages(rewards, gid, role, valid, num_groups=2))
  np.testing.assert_allclose(got[:3], r_design)
  np.testing.assert_allclose(got[3:], _np_zscore(r_agent, gid[3:], valid[3:]), atol=1e-5)
  both = adv.AdvantageConfig(agent="grpo", designer="grpo")
  got = np.asarray(adv.compute_advantages(rewards, gid, role, valid, 2, both))
  np.testing.assert_allclose(got[:3], _np_zscore(r_design, gid[:3], valid[:3]), atol=1e-5)
  np.testing.assert_allclose(got[3:], _np_zscore(r_agent, gid[3:], valid[3:]), atol=1e-5)


def test_whiten_per_role():
  r, gid, valid = _data(2, n=40)
  role = (np.arange(40) % 2).astype(np.int32)
  cfg = adv.AdvantageConfig(agent="center", designer="none", whiten_per_role=True)
  got = np.asarray(adv.compute_advantages(r, gid, role, valid, 5, cfg))
  for k in (ROLE_AGENT, ROLE_DESIGNER):
    sel = valid & (role == k)
    np.testing.assert_allclose(got[sel].mean(), 0.0, atol=1e-6)
    np.testing.assert_allclose(got[sel].std(), 1.0, atol=1e-4)
  assert np.all(got[~valid] == 0)


def test_ema_baseline():
  base = adv.EmaBaseline.create(3)
  valid = np.ones(4, bool)
  gid = np.array([0, 0, 1, 1], np.int32)
  a1, base = base.advantages(np.array([1.0, 0.0, 1.0, 1.0]), gid, valid, decay=0.9)
  np.testing.assert_allclose(a1, [0.5, -0.5, 0.0, 0.0])  # first sight: mean-centred
  np.testing.assert_allclose(base.value_G, [0.5, 1.0, 0.0])
  assert list(np.asarray(base.seen_G)) == [True, True, False]
  a2, base = base.advantages(np.array([1.0, 1.0, 0.0, 0.0]), gid, valid, decay=0.9)
  np.testing.assert_allclose(a2, [0.5, 0.5, -1.0, -1.0])
  np.testing.assert_allclose(base.value_G, [0.9 * 0.5 + 0.1 * 1.0, 0.9 * 1.0, 0.0], rtol=1e-6)


def test_zero_variance_groups_dropped_and_counted():
  r = np.array([1, 1, 1, 0, 1, 0, 0, 0, 5], np.float32)
  gid = np.array([0, 0, 0, 1, 1, 2, 2, 2, 1], np.int32)
  valid = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0], bool)  # the pad's 5 does not break group 1
  keep, dropped = adv.zero_variance_groups(r, gid, valid, num_groups=4)
  assert list(np.asarray(keep)) == [False, False, False, True, True, False, False, False, False]
  assert int(dropped) == 2


def test_drop_zero_variance_groups_on_a_batch():
  rewards = [1, 1, 0, 1, 0.5, 0.5, 0.7]
  batch = tj.from_sequences(
    [[1, 2, 3]] * 7,
    [[0, 1, 1]] * 7,
    [[0, -1, -2]] * 7,
    role=[ROLE_AGENT] * 4 + [ROLE_DESIGNER] * 2 + [ROLE_AGENT],
    rewards=rewards,
    advantages=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
    group_id=[0, 0, 1, 1, 0, 0, 2],
  )
  out, dropped = jax.jit(adv.drop_zero_variance_groups, static_argnums=1)(batch, 3)
  # agent group 0 (1, 1) and agent group 2 (one sample) are flat; the designer group (0.5, 0.5)
  # is not subject to dynamic sampling by default
  assert int(dropped) == 2
  assert np.asarray(out.valid_B).tolist() == [False, False, True, True, True, True, False]
  np.testing.assert_allclose(out.advantages_B, [0, 0, 0.3, 0.4, 0.5, 0.6, 0])
  assert np.asarray(out.loss_mask_BT).sum(1).tolist() == [0, 0, 2, 2, 2, 2, 0]
  assert out.tokens_BT.shape == batch.tokens_BT.shape
  _, dropped_all = adv.drop_zero_variance_groups(batch, 3, roles=(ROLE_AGENT, ROLE_DESIGNER))
  assert int(dropped_all) == 3


def test_config_validation():
  with pytest.raises(ValueError, match="advantage mode"):
    adv.AdvantageConfig(agent="zscore")
