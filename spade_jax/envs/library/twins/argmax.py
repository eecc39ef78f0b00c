"""Position (1-based) of the first largest (or smallest) value of a list.

Python twin of the `argmax` library program (the DESIGN.md section 5 contract). Its
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


class ArgmaxEnv:
  def __init__(self, max_turns=3, n=6, max_value=50, smallest=False):
    self.max_turns, self.n, self.max_value, self.smallest = max_turns, n, max_value, smallest
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    vals = [self.rng.randint(0, self.max_value) for _ in range(self.n)]
    best = min(vals) if self.smallest else max(vals)
    self.answer, self.turn = vals.index(best) + 1, 0
    which = "smallest" if self.smallest else "largest"
    return (
      f"Here is a list: {', '.join(map(str, vals))}. At which position (counting from "
      f"1) is its {which} value? If it occurs more than once, give the first position. "
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
