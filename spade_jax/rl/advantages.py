"""Advantage estimators in ``jnp`` (jit-able, on device), all keyed by explicit group ids.

Symbols: B batch (samples), G number of groups. A *group* is the set of samples that share a
prompt (GRPO: the plays of one environment at one step). Designer and agent samples never share
a group: :func:`role_group_ids` folds the role into the id, so every estimator normalises the two
roles separately. Invalid (pad) samples take no part in any statistic and get advantage 0.

* :func:`group_zscore` — GRPO: ``(r - mean_g) / (std_g + eps)``, population std; a zero-variance
  group gets exactly 0 (its centred rewards are 0).
* :func:`group_center` — Dr.GRPO: ``r - mean_g`` (no std scaling).
* :class:`EmaBaseline` — ``r - b_g`` with a per-group exponential-moving-average baseline.
* :func:`normalize_per_role` — optional whitening of the advantages within each role.
* :func:`zero_variance_groups` — DAPO dynamic sampling: which samples to drop, and how many
  groups were dropped.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax.trajectories import ROLE_AGENT, ROLE_DESIGNER, Trajectories

_F32 = jnp.float32


def role_group_ids(group_id_B, role_B, num_groups: int):
  """Group ids that separate roles: ``role * num_groups + group`` (``2 * num_groups`` ids)."""
  return role_B.astype(jnp.int32) * num_groups + group_id_B.astype(jnp.int32)


def group_moments(values_B, group_id_B, valid_B, num_groups: int):
  """Per-group count, mean and population variance over valid samples ``[G]`` each."""
  w_B = valid_B.astype(_F32)
  gid_B = jnp.where(valid_B, group_id_B, 0)
  count_G = jax.ops.segment_sum(w_B, gid_B, num_segments=num_groups)
  total_G = jax.ops.segment_sum(w_B * values_B, gid_B, num_segments=num_groups)
  mean_G = total_G / jnp.maximum(count_G, 1.0)
  dev_B = (values_B - mean_G[gid_B]) * w_B
  var_G = jax.ops.segment_sum(dev_B * dev_B, gid_B, num_segments=num_groups)
  var_G = var_G / jnp.maximum(count_G, 1.0)
  return count_G, mean_G, var_G


def group_center(rewards_B, group_id_B, valid_B, num_groups: int):
  """Dr.GRPO advantage ``r - mean_group(r)``; 0 on invalid samples."""
  rewards_B = rewards_B.astype(_F32)
  _, mean_G, _ = group_moments(rewards_B, group_id_B, valid_B, num_groups)
  gid_B = jnp.where(valid_B, group_id_B, 0)
  return jnp.where(valid_B, rewards_B - mean_G[gid_B], 0.0)


def group_zscore(rewards_B, group_id_B, valid_B, num_groups: int, eps: float = 1e-8):
  """GRPO advantage ``(r - mean_g) / (std_g + eps)`` (population std); 0 on invalid samples."""
  rewards_B = rewards_B.astype(_F32)
  _, mean_G, var_G = group_moments(rewards_B, group_id_B, valid_B, num_groups)
  gid_B = jnp.where(valid_B, group_id_B, 0)
  adv_B = (rewards_B - mean_G[gid_B]) / (jnp.sqrt(var_G)[gid_B] + eps)
  return jnp.where(valid_B, adv_B, 0.0)


@struct.dataclass
class EmaBaseline:
  """Per-group EMA of rewards. A group's first observation initialises its baseline."""

  value_G: jax.Array
  seen_G: jax.Array  # bool

  @classmethod
  def create(cls, num_groups: int) -> EmaBaseline:
    return cls(value_G=jnp.zeros((num_groups,), _F32), seen_G=jnp.zeros((num_groups,), bool))

  def advantages(self, rewards_B, group_id_B, valid_B, decay: float):
    """Returns ``(r - baseline_before_update, updated baseline)``. The baseline of a group seen
    for the first time is its batch mean (so its first advantages are mean-centred)."""
    num_groups = self.value_G.shape[0]
    rewards_B = rewards_B.astype(_F32)
    count_G, mean_G, _ = group_moments(rewards_B, group_id_B, valid_B, num_groups)
    present_G = count_G > 0
    base_G = jnp.where(self.seen_G, self.value_G, mean_G)
    gid_B = jnp.where(valid_B, group_id_B, 0)
    adv_B = jnp.where(valid_B, rewards_B - base_G[gid_B], 0.0)
    new_G = jnp.where(present_G, decay * base_G + (1.0 - decay) * mean_G, self.value_G)
    return adv_B, EmaBaseline(value_G=new_G, seen_G=self.seen_G | present_G)


def normalize_per_role(
  adv_B, role_B, valid_B, *, center: bool = True, scale: bool = True, eps: float = 1e-8
):
  """Whitens advantages within each role (agent and designer separately) over valid samples."""
  out_B = adv_B.astype(_F32)
  roles_B = jnp.where(valid_B, role_B, 0)
  _, mean_R, var_R = group_moments(out_B, roles_B, valid_B, 2)
  if center:
    out_B = out_B - mean_R[roles_B]
  if scale:
    out_B = out_B / (jnp.sqrt(var_R)[roles_B] + eps)
  return jnp.where(valid_B, out_B, 0.0)


def zero_variance_groups(rewards_B, group_id_B, valid_B, num_groups: int, tol: float = 1e-6):
  """DAPO dynamic sampling. Returns ``(keep_B, num_dropped_groups)``: ``keep_B`` is False for
  samples of groups whose valid rewards all agree (within ``tol``), which carry no GRPO signal."""
  count_G, _, var_G = group_moments(rewards_B.astype(_F32), group_id_B, valid_B, num_groups)
  flat_G = (count_G > 0) & (jnp.sqrt(var_G) <= tol)
  gid_B = jnp.where(valid_B, group_id_B, 0)
  keep_B = valid_B & ~flat_G[gid_B]
  return keep_B, jnp.sum(flat_G.astype(jnp.int32))


def drop_zero_variance_groups(
  batch: Trajectories, num_groups: int, *, roles: tuple[int, ...] = (ROLE_AGENT,), tol: float = 1e-6
):
  """Dynamic sampling on a batch: samples of flat groups (of the given roles) become pads (mask,
  advantage and ``valid`` zeroed; the shape is unchanged so nothing recompiles). Returns the
  batch and the number of groups dropped."""
  gid_B = role_group_ids(batch.group_id_B, batch.role_B, num_groups)
  in_roles_B = jnp.isin(batch.role_B, jnp.asarray(roles, jnp.int32))
  keep_B, dropped = zero_variance_groups(
    batch.rewards_B, gid_B, batch.valid_B & in_roles_B, 2 * num_groups, tol
  )
  keep_B = keep_B | (batch.valid_B & ~in_roles_B)
  out = batch.replace(
    loss_mask_BT=jnp.where(keep_B[:, None], batch.loss_mask_BT, 0.0).astype(
      batch.loss_mask_BT.dtype
    ),
    advantages_B=jnp.where(keep_B, batch.advantages_B, 0.0).astype(batch.advantages_B.dtype),
    valid_B=keep_B,
  )
  return out, dropped


MODES = ("grpo", "center", "none")


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
  """How each role's rewards become advantages.

  agent:    ``grpo`` (per-group z-score, the SPADE agent recipe), ``center`` (Dr.GRPO) or
            ``none`` (use the reward as is).
  designer: same choices; default ``none`` because SPADE's designer rewards arrive already
            centred per skill and scaled by the reward code.
  whiten_per_role: additionally whiten advantages within each role after the above.
  eps:      the ``std + eps`` denominator of the z-score.
  """

  agent: str = "grpo"
  designer: str = "none"
  whiten_per_role: bool = False
  eps: float = 1e-8

  def __post_init__(self):
    for name in ("agent", "designer"):
      if getattr(self, name) not in MODES:
        raise ValueError(f"advantage mode {name}={getattr(self, name)!r}; expected {MODES}")


def compute_advantages(
  rewards_B, group_id_B, role_B, valid_B, num_groups: int, cfg: AdvantageConfig = AdvantageConfig()
):
  """Advantages for a mixed batch: each role by its own mode, groups never shared across roles.
  ``group_id_B`` must lie in ``[0, num_groups)`` within each role."""
  gid_B = role_group_ids(group_id_B, role_B, num_groups)
  n = 2 * num_groups
  rewards_B = rewards_B.astype(_F32)

  def by_mode(mode):
    if mode == "grpo":
      return group_zscore(rewards_B, gid_B, valid_B, n, cfg.eps)
    if mode == "center":
      return group_center(rewards_B, gid_B, valid_B, n)
    return jnp.where(valid_B, rewards_B, 0.0)

  adv_B = jnp.where(role_B == ROLE_DESIGNER, by_mode(cfg.designer), by_mode(cfg.agent))
  adv_B = jnp.where((role_B == ROLE_DESIGNER) | (role_B == ROLE_AGENT), adv_B, 0.0)
  if cfg.whiten_per_role:
    adv_B = normalize_per_role(adv_B, role_B, valid_B, eps=cfg.eps)
  return jnp.where(valid_B, adv_B, 0.0)
