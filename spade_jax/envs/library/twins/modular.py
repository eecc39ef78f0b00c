"""Modular arithmetic with Python's sign convention for %.

Python twin of the `modular` library program (the DESIGN.md section 5 contract). Its
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


class ModularEnv:
  def __init__(self, max_turns=3, max_abs=50, max_mod=13):
    self.max_turns, self.max_abs, self.max_mod = max_turns, max_abs, max_mod
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    a = self.rng.randint(-self.max_abs, self.max_abs)
    b = self.rng.randint(-self.max_abs, self.max_abs)
    c = self.rng.randint(-self.max_abs, self.max_abs)
    m = self.rng.randint(2, self.max_mod)
    self.answer, self.turn = (a * b + c) % m, 0
    return (
      f"What is ({a} * {b} + {c}) mod {m}? The result must be between 0 and {m - 1}. "
      "Answer with \\boxed{N}."
    ), {}

  def solution(self):
    return f"\\boxed{{{self.answer}}}"

  def step(self, action):
    self.turn += 1
    ints = _boxed_ints(action)
    if ints == [self.answer]:
      return "Correct!", 1.0, True, False, {}
    if self.turn >= self.max_turns:
      return f"Wrong. No turns left. The answer was {self.answer}.", 0.0, False, True, {}
    if ints is None:
      return NO_ANSWER, 0.0, False, False, {}
    return "Wrong answer. Try again.", 0.0, False, False, {}
