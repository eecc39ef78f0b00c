"""Environment memory: past environments with their outcomes, used to seed designer prompts.

Each record keeps the first 2000 characters of an environment's source, its skill, the agent's
win rate on it, its regret and the step at which it was generated. The memory is a FIFO of at
most 200 records. When the designer writes a new game for a skill it is shown

* up to 2 **positive seeds**: records of the same skill whose win rate lies in the learnable band
  ``[0.15, 0.85]``, ranked by regret (highest first); 2 are sampled from the top 10;
* at most 1 **negative**: a record the agent found trivial (win rate > 0.9) or hopeless
  (< 0.1), labelled "avoid". Same skill when one exists, otherwise any skill.

Sampling is seeded and stateless: the caller passes a seed derived from (run seed, step, game,
attempt), so a resumed run draws the same seeds as an uninterrupted one and only the records
themselves are persisted (:meth:`EnvMemory.to_state` / :meth:`EnvMemory.from_state`, plain JSON).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
  """Memory sizes and selection bands (defaults: the released recipe)."""

  max_records: int = 200
  source_chars: int = 2000
  seed_band: tuple[float, float] = (0.15, 0.85)  # positive seeds: win rate inside (inclusive)
  seed_top: int = 10  # positives are drawn from this many highest-regret candidates
  num_seeds: int = 2
  too_easy: float = 0.9  # negatives: win rate strictly above ...
  too_hard: float = 0.1  # ... or strictly below

  def __post_init__(self):
    if self.max_records < 1 or self.source_chars < 1 or self.seed_top < 1 or self.num_seeds < 0:
      raise ValueError(f"invalid MemoryConfig: {self}")
    lo, hi = self.seed_band
    if not 0.0 <= lo <= hi <= 1.0:
      raise ValueError(f"MemoryConfig.seed_band={self.seed_band} must satisfy 0 <= lo <= hi <= 1")


@dataclasses.dataclass(frozen=True)
class EnvRecord:
  source: str
  skill: str
  win_rate: float
  regret: float
  step: int

  @property
  def too_easy_or_hard(self) -> str:
    """'too easy' / 'too hard' label for a negative example (by win rate at the midpoint)."""
    return "too easy" if self.win_rate >= 0.5 else "too hard"


def _rng(seed: int | Sequence[int]) -> np.random.Generator:
  entropy = [int(seed)] if isinstance(seed, int | np.integer) else [int(s) for s in seed]
  if any(e < 0 for e in entropy):
    raise ValueError(f"memory sampling seed must be non-negative ints, got {seed}")
  return np.random.default_rng(np.random.SeedSequence(entropy))


class EnvMemory:
  """FIFO store of :class:`EnvRecord` with positive/negative selection for designer prompts."""

  def __init__(self, config: MemoryConfig = MemoryConfig()):
    self.config = config
    self._records: collections.deque[EnvRecord] = collections.deque(maxlen=config.max_records)

  def __len__(self) -> int:
    return len(self._records)

  @property
  def records(self) -> tuple[EnvRecord, ...]:
    """Oldest first."""
    return tuple(self._records)

  def add(self, source: str, skill: str, win_rate: float, regret: float, step: int) -> EnvRecord:
    """Stores a record (source truncated); the oldest record is evicted beyond ``max_records``."""
    win_rate, regret = float(win_rate), float(regret)
    if not (np.isfinite(win_rate) and np.isfinite(regret)):
      raise ValueError(f"memory record needs finite win_rate/regret, got {win_rate}, {regret}")
    rec = EnvRecord(
      source=source[: self.config.source_chars],
      skill=str(skill),
      win_rate=win_rate,
      regret=regret,
      step=int(step),
    )
    self._records.append(rec)
    return rec

  def positive_candidates(self, skill: str) -> list[EnvRecord]:
    """Same-skill records in the win-rate band, highest regret first (newer first on ties),
    cut to the ``seed_top`` best."""
    lo, hi = self.config.seed_band
    order = [
      (i, r) for i, r in enumerate(self._records) if r.skill == skill and lo <= r.win_rate <= hi
    ]
    order.sort(key=lambda ir: (-ir[1].regret, -ir[0]))
    return [r for _, r in order[: self.config.seed_top]]

  def negative_candidates(self, skill: str) -> list[EnvRecord]:
    """Records the agent found trivial or hopeless: same skill if any exist, else all skills."""
    c = self.config
    bad = [r for r in self._records if r.win_rate > c.too_easy or r.win_rate < c.too_hard]
    same = [r for r in bad if r.skill == skill]
    return same or bad

  def select(
    self, skill: str, seed: int | Sequence[int]
  ) -> tuple[tuple[EnvRecord, ...], EnvRecord | None]:
    """``(positives, negative)`` for a designer prompt of ``skill``: up to ``num_seeds``
    positives sampled without replacement from the top candidates (returned in regret order)
    and at most one negative, all drawn from a generator seeded by ``seed``."""
    rng = _rng(seed)
    pos = self.positive_candidates(skill)
    n = min(self.config.num_seeds, len(pos))
    picked = sorted(rng.choice(len(pos), size=n, replace=False).tolist()) if n else []
    negs = self.negative_candidates(skill)
    negative = negs[int(rng.integers(len(negs)))] if negs else None
    return tuple(pos[i] for i in picked), negative

  def to_state(self) -> dict:
    """JSON-serialisable snapshot (records oldest first)."""
    return {
      "max_records": self.config.max_records,
      "records": [dataclasses.asdict(r) for r in self._records],
    }

  @classmethod
  def from_state(cls, state: dict, config: MemoryConfig = MemoryConfig()) -> EnvMemory:
    if state.get("max_records") != config.max_records:
      raise ValueError(
        f"memory state was saved with max_records={state.get('max_records')}, "
        f"config has {config.max_records}"
      )
    mem = cls(config)
    for r in state["records"]:
      mem._records.append(EnvRecord(**r))
    return mem
