"""Sort a list; feedback counts the positions already right.

Python twin of the `sorting` library program (the DESIGN.md section 5 contract). Its
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


class SortingEnv:
  def __init__(self, max_turns=3, n=5, max_abs=50, descending=False):
    self.max_turns, self.n, self.max_abs, self.descending = max_turns, n, max_abs, descending
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    vals = [self.rng.randint(-self.max_abs, self.max_abs) for _ in range(self.n)]
    self.answer, self.turn = sorted(vals, reverse=self.descending), 0
    order = "descending" if self.descending else "ascending"
    return (
      f"Sort these numbers in {order} order: {', '.join(map(str, vals))}. Answer with "
      "the sorted list, like \\boxed{a, b, c}."
    ), {}

  def solution(self):
    return "\\boxed{" + ", ".join(map(str, self.answer)) + "}"

  def step(self, action):
    self.turn += 1
    ints = _boxed_ints(action)
    if ints == self.answer:
      return "Correct!", 1.0, True, False, {}
    if self.turn >= self.max_turns:
      listed = ", ".join(map(str, self.answer))
      return f"Wrong. No turns left. The sorted list was {listed}.", 0.0, False, True, {}
    if ints is None:
      return NO_ANSWER, 0.0, False, False, {}
    right = sum(a == b for a, b in zip(ints, self.answer))
    return f"Not quite: {right} of {self.n} positions are correct.", 0.0, False, False, {}
