"""Crack a digit code; feedback counts digits in the right place.

Python twin of the `mastermind` library program (the DESIGN.md section 5 contract). Its
random draws go through ``self.rng = random.Random(seed)``, so tests can substitute the
interpreter's draws.
"""

import random
import re

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_INTS = re.compile(
  r"[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*(?:,[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*)*"
)
NO_ANSWER = "No answer found. Put your final answer in \\boxed{}."


def _boxed_ints(action):
  """The ints in the last \\boxed{...} of ``action`` (at most 12, each a 32-bit int), or None."""
  found = _BOXED.findall(action)
  if not found or not _INTS.fullmatch(found[-1]):
    return None
  vals = [int(v) for v in re.findall(r"-?[0-9]+", found[-1])]
  if len(vals) > 12 or any(not -(2**31) <= v < 2**31 for v in vals):
    return None
  return vals


class MastermindEnv:
  def __init__(self, max_turns=10, length=4, n_digits=6, distinct=False):
    self.max_turns, self.length, self.n_digits, self.distinct = (
      max_turns,
      length,
      n_digits,
      distinct,
    )
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    if self.distinct:
      self.answer = self.rng.sample(list(range(self.n_digits)), self.length)
    else:
      self.answer = [self.rng.randint(0, self.n_digits - 1) for _ in range(self.length)]
    self.turn, self.best = 0, 0
    repeats = "all different" if self.distinct else "repeats allowed"
    return (
      f"I chose a secret code of {self.length} digits, each from 0 to "
      f"{self.n_digits - 1} ({repeats}). Guess it as a list, like \\boxed{{1, 2, 3}}. "
      "After each guess I tell you how many digits are in the right place."
    ), {}

  def solution(self):
    return "\\boxed{" + ", ".join(map(str, self.answer)) + "}"

  def step(self, action):
    self.turn += 1
    ints = _boxed_ints(action)
    right = sum(a == b for a, b in zip(ints or [], self.answer))
    if ints is not None and len(ints) == self.length:
      self.best = max(self.best, right)
    if ints == self.answer:
      return "Correct! You cracked the code.", 1.0, True, False, {}
    if self.turn >= self.max_turns:
      listed = ", ".join(map(str, self.answer))
      return f"No turns left. The code was {listed}.", 0.0, False, True, {}
    if ints is None:
      return NO_ANSWER, 0.0, False, False, {}
    if len(ints) != self.length:
      return f"Your guess must have exactly {self.length} digits.", -0.1, False, False, {}
    return (
      (f"{right} of {self.length} digits are in the right place. Best so far: {self.best}."),
      0.0,
      False,
      False,
      {},
    )
