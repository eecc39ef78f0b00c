"""Count the multiples of k in an interval (negative bounds included).

Python twin of the `counting` library program (the DESIGN.md section 5 contract). Its
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


class CountingEnv:
  def __init__(self, max_turns=3, max_abs=60, max_k=9):
    self.max_turns, self.max_abs, self.max_k = max_turns, max_abs, max_k
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    a = self.rng.randint(-self.max_abs, self.max_abs)
    b = a + self.rng.randint(0, 2 * self.max_abs)
    k = self.rng.randint(2, self.max_k)
    self.answer = sum(1 for x in range(a, b + 1) if x % k == 0)
    self.turn = 0
    return (
      f"How many integers x with {a} <= x <= {b} are divisible by {k}? Answer with \\boxed{{N}}."
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
