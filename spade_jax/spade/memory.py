"""Environment memory: past environments with their outcomes, used to seed designer prompts.

Each record keeps the first 2000 characters of an environment's source, its skill, the agent's
win rate on it, its regret and the step at which it was generated. The memory is a FIFO of at
most 200 records. When the designer writes a new game for a skill it is shown

* up to 2 **positive seeds**: records of the same skill whose win rate lies in the learnable band
  ``[0.15, 0.85]``, ranked by regret (highest first); 2 are sampled from the top 10;
* at most 1 **negative**: a record the agent found trivial (win rate > 0.9) or hopeless
  (< 0.1), labelled "avoid". Same skill when one exists, otherwise any skill.

**Library seeds** (optional, `add_seed`): environments of the shipped library (the game twins,
the tool library) kept apart from the model-written records, never evicted, never counted in
``len(memory)``, never a negative and shown whole (not truncated). They bootstrap an empty memory:
a prompt's positive seeds are model-written candidates first, and the remaining slots are filled
with library seeds of the same skill, then of other skills. ``is_seed_copy`` tells a
designer output that only repeats a seed (whitespace-normalised equality).

Sampling is seeded and stateless: the caller passes a seed derived from (run seed, step, game,
attempt), so a resumed run draws the same seeds as an uninterrupted one and only the records
themselves are persisted (:meth:`EnvMemory.to_state` / :meth:`EnvMemory.from_state`, plain JSON).
"""

from __future__ import annotations

import collections
import dataclasses
import re
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


ORIGIN_MODEL, ORIGIN_LIBRARY = "model", "library"


@dataclasses.dataclass(frozen=True)
class EnvRecord:
  source: str
  skill: str
  win_rate: float
  regret: float
  step: int
  origin: str = ORIGIN_MODEL  # "model": written by the designer; "library": a library seed
  name: str = ""  # a library seed's environment name

  @property
  def is_seed(self) -> bool:
    return self.origin == ORIGIN_LIBRARY

  @property
  def too_easy_or_hard(self) -> str:
    """'too easy' / 'too hard' label for a negative example (by win rate at the midpoint)."""
    return "too easy" if self.win_rate >= 0.5 else "too hard"


def normalise_source(source: str) -> str:
  """A source with every run of whitespace made one space (what a verbatim copy keeps)."""
  return " ".join(source.split())


def class_text(source: str) -> str:
  """``source`` from its first top-level ``class`` statement on, whitespace-normalised (empty
  without one): what a copy of an environment keeps whatever precedes its class (a module
  docstring, imports, helpers, or a designer reply prefix that replaces them)."""
  found = re.search(r"^class\b", source, re.MULTILINE)
  return normalise_source(source[found.start() :]) if found else ""


def copy_key(source: str) -> str:
  """What two sources share when one is a verbatim copy of the other: :func:`class_text`, or
  for a source without a class its whole whitespace-normalised text."""
  return class_text(source) or normalise_source(source)


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
    self._seeds: list[EnvRecord] = []

  def __len__(self) -> int:
    """The number of model-written records (library seeds are not counted)."""
    return len(self._records)

  @property
  def seeds(self) -> tuple[EnvRecord, ...]:
    """The library seeds, in the order they were added."""
    return tuple(self._seeds)

  def add_seed(self, source: str, skill: str, name: str = "") -> EnvRecord:
    """Stores a library environment as a seed (whole source; origin "library")."""
    rec = EnvRecord(
      source=source,
      skill=str(skill),
      win_rate=0.0,
      regret=0.0,
      step=-1,
      origin=ORIGIN_LIBRARY,
      name=str(name),
    )
    self._seeds.append(rec)
    return rec

  def seed_candidates(self, skill: str) -> tuple[list[EnvRecord], list[EnvRecord]]:
    """``(same, other)``: the library seeds of ``skill`` and those of the other skills."""
    same = [r for r in self._seeds if r.skill == skill]
    return same, [r for r in self._seeds if r.skill != skill]

  def is_seed_copy(self, source: str) -> EnvRecord | None:
    """The library seed ``source`` repeats verbatim (equal :func:`copy_key`), or None."""
    key = copy_key(source)
    if not key:
      return None
    return next((r for r in self._seeds if copy_key(r.source) == key), None)

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
    positives sampled without replacement from the top candidates (returned in regret order),
    slots left over filled with library seeds (`seed_candidates`: the skill's, then the other
    skills', sampled the same way), and at most one negative (model-written only), all drawn from a
    generator seeded by ``seed``."""
    rng = _rng(seed)
    pos = self.positive_candidates(skill)
    n = min(self.config.num_seeds, len(pos))
    picked = sorted(rng.choice(len(pos), size=n, replace=False).tolist()) if n else []
    negs = self.negative_candidates(skill)
    negative = negs[int(rng.integers(len(negs)))] if negs else None
    chosen = [pos[i] for i in picked]
    for lib in self.seed_candidates(skill) if self._seeds else ():
      m = min(self.config.num_seeds - len(chosen), len(lib))
      if m > 0:
        chosen += [lib[i] for i in sorted(rng.choice(len(lib), size=m, replace=False).tolist())]
    return tuple(chosen), negative

  def to_state(self) -> dict:
    """JSON-serialisable snapshot (records oldest first, then the library seeds)."""
    return {
      "max_records": self.config.max_records,
      "records": [dataclasses.asdict(r) for r in self._records],
      "seeds": [dataclasses.asdict(r) for r in self._seeds],
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
    mem._seeds = [EnvRecord(**r) for r in state.get("seeds", [])]
    return mem
