"""Evaluate a chain of + - * on small positive ints.

Python twin of the `arith_chain` library program (the DESIGN.md section 5 contract). Its
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


class ArithChainEnv:
  def __init__(self, max_turns=3, n_terms=3, max_value=20, ops="+*-"):
    self.max_turns, self.n_terms, self.max_value, self.ops = max_turns, n_terms, max_value, ops
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    terms = [self.rng.randint(1, self.max_value) for _ in range(self.n_terms)]
    value, expr = terms[0], str(terms[0])
    for i, t in enumerate(terms[1:], 1):
      op = self.ops[(i - 1) % len(self.ops)]
      value = value + t if op == "+" else value - t if op == "-" else value * t
      expr = f"{expr} {op} {t}"
      if i < self.n_terms - 1:
        expr = f"({expr})"
    self.answer, self.turn = value, 0
    return f"Compute {expr}. Answer with \\boxed{{N}}.", {}

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
