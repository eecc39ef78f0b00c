"""Matching random draws between a Python environment and the interpreter.

The interpreter logs every value it draws (`EnvState.draws`, in order) and can replay a tape
of values instead of sampling (`ProgramEnv.reset_with_tape`). A draw is recorded at the level
of Python's ``random`` API: ``randint(a, b)`` -> the value; ``choice(seq)`` -> the index;
``sample(pop, k)`` -> the ``k`` chosen indices in order (``sample(range(a, b), k)``, the
interpreter's ``rsample``, logs ``value - a``); ``shuffle(x)`` -> the permutation
``perm`` with ``new[i] = old[perm[i]]``. Both directions use these helpers:

* interpreter -> Python: `DrawReplay(draws)` is an RNG whose calls return the interpreter's
  values, so the Python twin sees exactly the interpreter's drawn state;
* Python -> interpreter: `DrawRecorder(seed)` is a real `random.Random` that records its
  draws in this format; pass ``recorder.tape`` to ``reset_with_tape``.

`substitute_random(module, rng)` makes ``module.random.Random(seed)`` (and the module-level
``random.randint`` etc.) use ``rng`` while active, for environments written the ordinary way.
"""

from __future__ import annotations

import contextlib
import random
import types


class DrawMismatch(AssertionError):
  """The Python side asked for a draw the interpreter did not make (or out of range)."""


class DrawReplay:
  """Returns recorded draws, checking that each request fits the recorded value."""

  def __init__(self, draws):
    self.draws = [int(d) for d in draws]
    self.pos = 0

  def _next(self, what: str) -> int:
    if self.pos >= len(self.draws):
      raise DrawMismatch(f"{what}: no recorded draw left (used {self.pos})")
    self.pos += 1
    return self.draws[self.pos - 1]

  def seed(self, *args, **kwargs):
    pass

  def randint(self, a: int, b: int) -> int:
    v = self._next(f"randint({a}, {b})")
    if not a <= v <= b:
      raise DrawMismatch(f"randint({a}, {b}): recorded value {v} out of range")
    return v

  def choice(self, seq):
    i = self._next(f"choice(len {len(seq)})")
    if not 0 <= i < len(seq):
      raise DrawMismatch(f"choice: recorded index {i} out of range {len(seq)}")
    return seq[i]

  def _indices(self, n: int, k: int, what: str) -> list[int]:
    idx = [self._next(what) for _ in range(k)]
    if len(set(idx)) != k or not all(0 <= i < n for i in idx):
      raise DrawMismatch(f"{what}: recorded indices {idx} are not distinct in range({n})")
    return idx

  def sample(self, population, k: int):
    pop = population if isinstance(population, range) else list(population)
    return [pop[i] for i in self._indices(len(pop), k, f"sample(len {len(pop)}, {k})")]

  def shuffle(self, x) -> None:
    perm = self._indices(len(x), len(x), f"shuffle(len {len(x)})")
    x[:] = [x[i] for i in perm]

  def done(self) -> bool:
    return self.pos == len(self.draws)


class DrawRecorder(random.Random):
  """A seeded `random.Random` that records its draws in the interpreter's tape format."""

  def __init__(self, seed=None):
    super().__init__(seed)
    self.tape: list[int] = []

  def randint(self, a, b):
    v = super().randint(a, b)
    self.tape.append(v)
    return v

  def choice(self, seq):
    i = self._randbelow(len(seq))
    self.tape.append(i)
    return seq[i]

  def sample(self, population, k, **kwargs):
    pop = population if isinstance(population, range) else list(population)
    idx = super().sample(range(len(pop)), k)
    self.tape += idx
    return [pop[i] for i in idx]

  def shuffle(self, x):
    perm = list(range(len(x)))
    super().shuffle(perm)
    self.tape += perm
    x[:] = [x[i] for i in perm]


@contextlib.contextmanager
def substitute_random(module: types.ModuleType, rng):
  """While active, ``module.random`` is a stand-in whose ``Random(seed)`` returns ``rng``
  and whose module-level draw functions call ``rng``."""
  shim = types.SimpleNamespace(
    Random=lambda seed=None: rng,
    seed=lambda *a, **k: None,
    randint=rng.randint,
    choice=rng.choice,
    sample=rng.sample,
    shuffle=rng.shuffle,
  )
  saved = module.random
  module.random = shim
  try:
    yield rng
  finally:
    module.random = saved
