"""Weighted sum of values (a dot product).

Python twin of the `weighted_sum` library program (the DESIGN.md section 5 contract). Its
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


class WeightedSumEnv:
  def __init__(self, max_turns=3, n=3, max_weight=9, max_value=20):
    self.max_turns, self.n, self.max_weight, self.max_value = max_turns, n, max_weight, max_value
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    w = [self.rng.randint(1, self.max_weight) for _ in range(self.n)]
    v = [self.rng.randint(-self.max_value, self.max_value) for _ in range(self.n)]
    self.answer, self.turn = sum(a * b for a, b in zip(w, v)), 0
    ws, vs = ", ".join(map(str, w)), ", ".join(map(str, v))
    return (
      f"Weights: {ws}. Values: {vs}. Multiply each value by its weight and add the "
      "products. Answer with \\boxed{N}."
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
