"""Advantage estimation of the agent's GRPO groups, shared by both SPADE loops (jit-able ``jnp``).

A *group* is the plays of one game at one step (the same environment, a seed per play): returns
are laid out ``[G, P]`` (G games, P plays) with masks of the plays that count. Both loops call
:func:`group_advantages`: the Python-environment loop (`spade_jax.spade.agent`, on the host) and
the fully on-device tiny loop (`spade_jax.tiny.iteration`, under ``jit``). Designer samples do
not pass through here: their rewards arrive already centred per skill and scaled
(`spade_jax.spade.rewards.designer_rewards`) and are used as their advantages.

Modes (config key ``train.advantage``):

* ``zscore`` — GRPO (the SPADE recipe): ``(r - mean_g) / (std_g + eps)``, population std over the
  group's kept plays;
* ``center`` — Dr.GRPO, "GRPO without std normalisation": ``r - mean_g``.

Kept plays are the valid ones that did not crash (a crashed environment is the designer's
fault; its episodes are dropped). In both modes a group whose kept returns all agree (a single
kept play included) gets exactly 0 (decided by ``max <= min``, so no rounding in the mean can
leak a small advantage), and plays not kept get 0.

Dynamic sampling (DAPO; config key ``train.dynamic_sampling``, Python-environment loop only):
:func:`informative_groups` marks the groups that carry a learning signal; the loop drops the
others and refills its batch from further rounds of plays (`spade_jax.spade.agent`).
"""

from __future__ import annotations

import jax.numpy as jnp

_F32 = jnp.float32
MODES = ("zscore", "center")


def kept_plays(valid_GP, crashed_GP=None):
  """The plays that enter the batch ``[G, P]``: valid and not crashed."""
  keep_GP = jnp.asarray(valid_GP, bool)
  if crashed_GP is not None:
    keep_GP = keep_GP & ~jnp.asarray(crashed_GP, bool)
  return keep_GP


def _flat(r_GP, keep_GP):
  """``[G, 1]``: the group's kept returns all agree (also True with one or no kept play)."""
  hi_G = jnp.max(jnp.where(keep_GP, r_GP, -jnp.inf), axis=-1, keepdims=True)
  lo_G = jnp.min(jnp.where(keep_GP, r_GP, jnp.inf), axis=-1, keepdims=True)
  return hi_G <= lo_G


def group_advantages(
  returns_GP, valid_GP, crashed_GP=None, *, mode: str = "zscore", eps: float = 1e-8
):
  """Per-game advantages ``[G, P]`` and the mask of plays kept in the agent batch ``[G, P]``.

  ``mode`` is ``zscore`` (GRPO) or ``center`` (Dr.GRPO); see the module docstring. ``eps`` is
  the z-score's ``std + eps`` denominator.
  """
  if mode not in MODES:
    raise ValueError(f"advantage mode {mode!r}; expected one of {MODES}")
  keep_GP = kept_plays(valid_GP, crashed_GP)
  r_GP = jnp.asarray(returns_GP, _F32)
  w_GP = keep_GP.astype(_F32)
  n_G = jnp.maximum(jnp.sum(w_GP, axis=-1, keepdims=True), 1.0)
  mean_G = jnp.sum(r_GP * w_GP, axis=-1, keepdims=True) / n_G
  flat_G = _flat(r_GP, keep_GP)
  if mode == "zscore":
    var_G = jnp.sum(jnp.square(r_GP - mean_G) * w_GP, axis=-1, keepdims=True) / n_G
    adv_GP = (r_GP - mean_G) / (jnp.sqrt(var_G) + eps)
  else:
    adv_GP = r_GP - mean_G
  return jnp.where(keep_GP & ~flat_G, adv_GP, 0.0), keep_GP


def informative_groups(returns_GP, keep_GP):
  """``[G]`` bool: groups with at least two kept plays whose returns differ, the ones whose
  advantages are not all 0 (DAPO dynamic sampling keeps only these)."""
  return ~_flat(jnp.asarray(returns_GP, _F32), jnp.asarray(keep_GP, bool))[:, 0]
