"""The agent's plays of one pool over its replay window, and the per-game statistics the
designer rewards are computed from.

A pool generated at regeneration step ``K`` is played at steps ``K .. K + W - 1`` (``W`` =
``regen_interval``). At offset 0 the agent plays every game ``P`` times without the hint and
``H`` times with it, on matched seeds; at later offsets only unhinted plays happen. The designer
reward of a game uses

* the **win rate** over *all* its unhinted plays in the window,
* the **regret** arm from offset 0 only: mean hinted return minus mean unhinted return at
  offset 0 (matched in time, so the agent's improvement during the window does not inflate it),
* the **micro learning progress**: win rate over the late half of the played offsets minus the
  early half.

Everything is fixed-shape with validity masks so that one compiled function serves every pool
(``W`` offsets x ``G`` games x ``P`` plays); ``jax.numpy`` only, no host sync, jittable and usable
inside the fully on-device loop. The host-side buffer (``delayed.py``) holds the same struct as
numpy arrays.

Symbols: W window offsets, G games, P unhinted plays per game and offset, H hinted plays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

_F32 = jnp.float32


@struct.dataclass
class WindowPlays:
  """Outcomes of all agent plays of one pool during its window."""

  returns_WGP: jax.Array  # f32 unhinted episode returns (clamped to [-1, 1])
  valid_WGP: jax.Array  # bool: play happened and its environment did not crash
  hint_returns_GH: jax.Array  # f32 hinted returns at offset 0
  hint_valid_GH: jax.Array  # bool
  crashed_G: jax.Array  # bool: some play (hinted or not) of the game hung or crashed


@struct.dataclass
class GameStats:
  """Per-game summaries of a window ``[G]`` each."""

  win_rate_G: jax.Array  # unhinted wins / unhinted plays over the whole window
  return_G: jax.Array  # mean unhinted return at offset 0
  return_hint_G: jax.Array  # mean hinted return at offset 0
  micro_lp_G: jax.Array  # late-half minus early-half win rate (0 with < 2 played offsets)
  played_G: jax.Array  # bool: at least one valid unhinted play
  crashed_G: jax.Array  # bool


def empty_window(window: int, num_games: int, plays: int, hint_plays: int) -> WindowPlays:
  """A window with no plays recorded (numpy arrays; usable on host and as jit constants)."""
  if min(window, num_games, plays) < 1 or hint_plays < 0:
    raise ValueError(
      f"window shape needs window, num_games, plays >= 1 and hint_plays >= 0; got "
      f"({window}, {num_games}, {plays}, {hint_plays})"
    )
  return WindowPlays(
    returns_WGP=np.zeros((window, num_games, plays), np.float32),
    valid_WGP=np.zeros((window, num_games, plays), bool),
    hint_returns_GH=np.zeros((num_games, hint_plays), np.float32),
    hint_valid_GH=np.zeros((num_games, hint_plays), bool),
    crashed_G=np.zeros((num_games,), bool),
  )


def record_plays(win: WindowPlays, offset, returns_GP, valid_GP, crashed_G) -> WindowPlays:
  """Window with the unhinted plays at ``offset`` (may be traced) written in; crash flags are
  OR-ed. Crashed episodes must already be marked invalid in ``valid_GP``."""
  return win.replace(
    returns_WGP=jnp.asarray(win.returns_WGP).at[offset].set(jnp.asarray(returns_GP, _F32)),
    valid_WGP=jnp.asarray(win.valid_WGP).at[offset].set(jnp.asarray(valid_GP, bool)),
    crashed_G=jnp.asarray(win.crashed_G) | jnp.asarray(crashed_G, bool),
  )


def record_hint_plays(win: WindowPlays, returns_GH, valid_GH, crashed_G) -> WindowPlays:
  """Window with the hinted plays (offset 0) written in; crash flags are OR-ed."""
  return win.replace(
    hint_returns_GH=jnp.asarray(returns_GH, _F32),
    hint_valid_GH=jnp.asarray(valid_GH, bool),
    crashed_G=jnp.asarray(win.crashed_G) | jnp.asarray(crashed_G, bool),
  )


def _masked_mean(values, mask, axis):
  mask = mask.astype(_F32)
  return jnp.sum(values * mask, axis=axis) / jnp.maximum(jnp.sum(mask, axis=axis), 1.0)


def window_stats(win: WindowPlays, win_threshold: float = 1.0) -> GameStats:
  """Per-game statistics of a window. A play is a *win* when its return is at least
  ``win_threshold`` (the environment contract rewards a correct answer with exactly 1.0).

  Micro-LP halves are taken over the offsets at which the game was actually played (so a
  partial final window still splits into halves): with ``n`` played offsets the early half is
  the first ``n // 2`` of them and the late half the last ``n // 2`` (the middle one of an odd
  count belongs to neither).
  """
  returns_WGP = jnp.asarray(win.returns_WGP, _F32)
  valid_WGP = jnp.asarray(win.valid_WGP, bool)
  win_WGP = (returns_WGP >= win_threshold) & valid_WGP
  wins_WG = jnp.sum(win_WGP, axis=-1).astype(_F32)
  count_WG = jnp.sum(valid_WGP, axis=-1).astype(_F32)

  count_G = jnp.sum(count_WG, axis=0)
  win_rate_G = jnp.sum(wins_WG, axis=0) / jnp.maximum(count_G, 1.0)

  return_G = _masked_mean(returns_WGP[0], valid_WGP[0], axis=-1)
  return_hint_G = _masked_mean(
    jnp.asarray(win.hint_returns_GH, _F32), jnp.asarray(win.hint_valid_GH, bool), axis=-1
  )

  played_WG = count_WG > 0
  n_played_G = jnp.sum(played_WG, axis=0)
  rank_WG = jnp.cumsum(played_WG, axis=0) - 1
  half_G = n_played_G // 2
  early_WG = played_WG & (rank_WG < half_G[None])
  late_WG = played_WG & (rank_WG >= (n_played_G - half_G)[None])

  def half_rate(sel_WG):
    sel = sel_WG.astype(_F32)
    return jnp.sum(wins_WG * sel, axis=0) / jnp.maximum(jnp.sum(count_WG * sel, axis=0), 1.0)

  micro_lp_G = jnp.where(half_G > 0, half_rate(late_WG) - half_rate(early_WG), 0.0)
  return GameStats(
    win_rate_G=win_rate_G,
    return_G=return_G,
    return_hint_G=return_hint_G,
    micro_lp_G=micro_lp_G,
    played_G=count_G > 0,
    crashed_G=jnp.asarray(win.crashed_G, bool),
  )
