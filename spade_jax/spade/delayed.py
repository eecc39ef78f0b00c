"""Delayed designer training: designer samples wait until their pool's replay window is over.

Designer samples written at regeneration step ``K`` cannot be rewarded at ``K``: their reward
depends on how the agent does on their environments over the window ``K .. K + I - 1``
(``I`` = ``regen_interval``). They are therefore held in this buffer together with the window's
play outcomes and trained at step ``K + delay`` (``delay`` a positive multiple of ``I``,
default ``I``), when their reward is computed from the complete window
(:func:`spade_jax.spade.rewards.designer_rewards_from_window`). At the end of training the
loop calls :meth:`DelayedDesignerBuffer.flush` so the final epoch's samples are trained too (on
the part of their window that was played).

Host side and explicit: the whole buffer (designer sample records, play outcomes) round-trips
through JSON (:meth:`to_state` / :meth:`from_state`) for exact resume.

A *sample record* is whatever the loop needs to train the sample later (token ids, rollout
log-probs, ...) as JSON-serialisable values, plus an int ``"game"``: the pool slot this attempt
filled, or -1 for a rejected attempt (which gets reward 0, i.e. no gradient). A game slot is
*valid* when some sample record claims it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from spade_jax.spade.rewards import (
  DesignerRewardConfig,
  DesignerRewards,
  LPTracker,
  designer_rewards_from_window,
)
from spade_jax.spade.skills import skill_ids
from spade_jax.spade.window import WindowPlays, empty_window

_WINDOW_FIELDS = {
  "returns_WGP": np.float32,
  "valid_WGP": bool,
  "hint_returns_GH": np.float32,
  "hint_valid_GH": bool,
  "crashed_G": bool,
}


def validate_delay(delay: int, regen_interval: int) -> int:
  """Returns ``delay`` if it is a positive multiple of ``regen_interval``; else ValueError."""
  if regen_interval < 1:
    raise ValueError(f"regen_interval must be >= 1, got {regen_interval}")
  if delay < 1 or delay % regen_interval:
    raise ValueError(
      f"designer training delay must be a positive multiple of regen_interval={regen_interval} "
      f"(the designer's reward needs its pool's whole replay window); got delay={delay}"
    )
  return delay


@dataclasses.dataclass
class PendingEpoch:
  """Designer samples of one regeneration epoch and the plays of their pool."""

  gen_step: int
  skills: tuple[str, ...]  # per game slot
  samples: list[dict]
  window: WindowPlays  # numpy arrays

  @property
  def valid_G(self) -> np.ndarray:
    valid = np.zeros((len(self.skills),), bool)
    for s in self.samples:
      if s["game"] >= 0:
        valid[s["game"]] = True
    return valid

  @property
  def skill_G(self) -> np.ndarray:
    return np.asarray(skill_ids(self.skills), np.int32)

  def rewards(self, tracker: LPTracker, scale: float, cfg: DesignerRewardConfig) -> DesignerRewards:
    """Designer rewards of this epoch's games from its window (jitted core)."""
    return designer_rewards_from_window(
      self.window, self.skill_G, self.valid_G, tracker, scale, cfg=cfg
    )

  def sample_rewards(self, reward_G) -> list[float]:
    """Reward of each sample record: its game's reward, 0 for rejected attempts."""
    reward_G = np.asarray(reward_G)
    return [float(reward_G[s["game"]]) if s["game"] >= 0 else 0.0 for s in self.samples]


class DelayedDesignerBuffer:
  """Pending designer epochs keyed by generation step, with their windows' play outcomes."""

  def __init__(
    self, regen_interval: int, num_games: int, plays: int, hint_plays: int, delay: int | None = None
  ):
    self.regen_interval = regen_interval
    self.delay = validate_delay(regen_interval if delay is None else delay, regen_interval)
    self.shape = (regen_interval, num_games, plays, hint_plays)
    empty_window(*self.shape)  # validates the shape
    self._pending: list[PendingEpoch] = []
    self._last_gen_step: int | None = None

  @property
  def pending_steps(self) -> tuple[int, ...]:
    return tuple(e.gen_step for e in self._pending)

  def open_epoch(self, gen_step: int, skills: Sequence[str], samples: Sequence[dict]) -> None:
    """Registers the designer samples of the pool generated at ``gen_step``; later plays are
    recorded into this epoch until the next one opens."""
    num_games = self.shape[1]
    if self._last_gen_step is not None and gen_step <= self._last_gen_step:
      raise ValueError(f"epoch at step {gen_step} opened after step {self._last_gen_step}")
    if len(skills) != num_games:
      raise ValueError(f"expected {num_games} skills (one per game slot), got {len(skills)}")
    skill_ids(skills)
    for s in samples:
      if not -1 <= int(s["game"]) < num_games:
        raise ValueError(f"sample game index {s['game']} outside [-1, {num_games})")
    self._pending.append(
      PendingEpoch(
        int(gen_step), tuple(skills), [dict(s) for s in samples], empty_window(*self.shape)
      )
    )
    self._last_gen_step = int(gen_step)

  def _current(self, step: int) -> tuple[PendingEpoch, int]:
    if not self._pending or self._pending[-1].gen_step != self._last_gen_step:
      raise ValueError(f"plays recorded at step {step} but no designer epoch is open")
    epoch = self._pending[-1]
    offset = step - epoch.gen_step
    if not 0 <= offset < self.regen_interval:
      raise ValueError(
        f"plays at step {step} fall outside the window of the pool generated at step "
        f"{epoch.gen_step} (regen_interval={self.regen_interval})"
      )
    return epoch, offset

  def record_plays(self, step: int, returns_GP, valid_GP, crashed_G) -> None:
    """Unhinted plays of the current pool at ``step`` (crashed episodes invalid in
    ``valid_GP``; ``crashed_G`` flags games with any crashed step)."""
    epoch, offset = self._current(step)
    w = epoch.window
    w.returns_WGP[offset] = np.asarray(returns_GP, np.float32)
    w.valid_WGP[offset] = np.asarray(valid_GP, bool)
    w.crashed_G[:] |= np.asarray(crashed_G, bool)

  def record_hint_plays(self, step: int, returns_GH, valid_GH, crashed_G) -> None:
    """Hinted plays, only at the pool's generation step (offset 0)."""
    epoch, offset = self._current(step)
    if offset != 0:
      raise ValueError(
        f"hinted plays at step {step}: they belong to offset 0 (step {epoch.gen_step})"
      )
    w = epoch.window
    w.hint_returns_GH[:] = np.asarray(returns_GH, np.float32)
    w.hint_valid_GH[:] = np.asarray(valid_GH, bool)
    w.crashed_G[:] |= np.asarray(crashed_G, bool)

  def pop_due(self, step: int) -> list[PendingEpoch]:
    """Removes and returns (oldest first) the epochs to train at ``step``:
    ``gen_step + delay <= step``."""
    due = [e for e in self._pending if e.gen_step + self.delay <= step]
    self._pending = [e for e in self._pending if e.gen_step + self.delay > step]
    return due

  def flush(self) -> list[PendingEpoch]:
    """Removes and returns every pending epoch (end of training: the final epoch is trained
    on the part of its window that was played)."""
    due, self._pending = self._pending, []
    return due

  def to_state(self) -> dict:
    """JSON-serialisable snapshot (arrays as nested lists; float32 values round-trip exactly)."""
    return {
      "regen_interval": self.regen_interval,
      "delay": self.delay,
      "shape": list(self.shape),
      "last_gen_step": self._last_gen_step,
      "pending": [
        {
          "gen_step": e.gen_step,
          "skills": list(e.skills),
          "samples": e.samples,
          "window": {k: np.asarray(getattr(e.window, k)).tolist() for k in _WINDOW_FIELDS},
        }
        for e in self._pending
      ],
    }

  @classmethod
  def from_state(cls, state: dict) -> DelayedDesignerBuffer:
    r, g, p, h = state["shape"]
    buf = cls(state["regen_interval"], g, p, h, delay=state["delay"])
    buf._last_gen_step = state["last_gen_step"]
    for e in state["pending"]:
      arrays = {k: np.asarray(e["window"][k], dt) for k, dt in _WINDOW_FIELDS.items()}
      empty = empty_window(r, g, p, h)
      for k, a in arrays.items():
        want = getattr(empty, k).shape
        if a.shape != want:
          raise ValueError(
            f"delayed buffer state: window field {k} has shape {a.shape}, expected {want}"
          )
      buf._pending.append(
        PendingEpoch(
          int(e["gen_step"]), tuple(e["skills"]), list(e["samples"]), WindowPlays(**arrays)
        )
      )
    return buf
