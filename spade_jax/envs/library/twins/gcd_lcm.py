"""Greatest common divisor or least common multiple of two numbers.

Python twin of the `gcd_lcm` library program (the DESIGN.md section 5 contract). Its
random draws go through ``self.rng = random.Random(seed)``, so tests can substitute the
interpreter's draws.
"""

import math
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


class GcdLcmEnv:
  def __init__(self, max_turns=3, max_factor=12, max_mult=15, mode="gcd"):
    self.max_turns, self.max_factor, self.max_mult, self.mode = (
      max_turns,
      max_factor,
      max_mult,
      mode,
    )
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    g = self.rng.choice(list(range(2, self.max_factor + 1)))
    a = g * self.rng.randint(1, self.max_mult)
    b = g * self.rng.randint(1, self.max_mult)
    gcd = math.gcd(a, b)
    self.answer = gcd if self.mode == "gcd" else a // gcd * b
    self.turn = 0
    what = "greatest common divisor" if self.mode == "gcd" else "least common multiple"
    return f"What is the {what} of {a} and {b}? Answer with \\boxed{{N}}.", {}

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
