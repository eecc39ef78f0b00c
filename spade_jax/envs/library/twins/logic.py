"""Truth value of a propositional connective over two arithmetic facts.

Python twin of the `logic` library program (the DESIGN.md section 5 contract). Its
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


class LogicEnv:
  def __init__(self, max_turns=2, max_value=20, connective="xor"):
    self.max_turns, self.max_value, self.connective = max_turns, max_value, connective
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    a, b, c = (self.rng.randint(0, self.max_value) for _ in range(3))
    p, q = a > b, c % 2 == 0
    value = {"xor": p != q, "and": p and q, "or": p or q, "implies": (not p) or q}[self.connective]
    self.answer, self.turn = int(value), 0
    claim = {
      "xor": "exactly one of P and Q is true",
      "and": "both P and Q are true",
      "or": "at least one of P and Q is true",
      "implies": "P implies Q",
    }[self.connective]
    return (
      f'Let a = {a}, b = {b} and c = {c}. P is the statement "a > b" and Q is the '
      f'statement "c is even". Is it true that {claim}? Answer \\boxed{{1}} for '
      "yes or \\boxed{0} for no."
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
