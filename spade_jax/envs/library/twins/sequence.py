"""Continue an arithmetic (order 1) or quadratic (order 2) sequence.

Python twin of the `sequence` library program (the DESIGN.md section 5 contract). Its
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


class SequenceEnv:
  def __init__(self, max_turns=3, n_shown=5, order=1, max_start=20, max_step=9):
    self.max_turns, self.n_shown, self.order = max_turns, n_shown, order
    self.max_start, self.max_step = max_start, max_step
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    term = self.rng.randint(-self.max_start, self.max_start)
    diff = self.rng.randint(-self.max_step, self.max_step)
    accel = self.rng.randint(-3, 3) if self.order == 2 else 0
    shown = [term]
    for _ in range(self.n_shown - 1):
      term += diff
      diff += accel
      shown.append(term)
    self.answer, self.turn = term + diff, 0
    terms = ", ".join(str(t) for t in shown)
    return (
      f"Continue the sequence: {terms}. What is the next number? Answer with \\boxed{{N}}."
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
