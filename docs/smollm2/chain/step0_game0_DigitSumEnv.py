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


class DigitSumEnv:
  def __init__(self, max_turns=3, n_digits=5):
    self.max_turns, self.n_digits = max_turns, n_digits
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    n = self.rng.randint(10 ** (self.n_digits - 1), 10**self.n_digits - 1)
    self.answer, self.turn = sum(int(c) for c in str(n)), 0
    return f"What is the sum of the digits of {n}? Answer with \\boxed{{N}}.", {}

  def solution(self):
    return f"\\boxed{{{self.answer}}}"

  def step(self, action):
    self.turn += 1
    ints = _boxed_ints(action)
    if ints == [self.answer]:
      return "Correct!", 1.0, True, False, {}
    if self.turn >= self.max_turns:
      return f"Wrong answer. Try again.", 0.0, False, False, {}
    if ints is None:
      return NO_ANSWER, 0.0, False, False, {}
    return "Wrong answer. Try again.", 0.0, False, False, {}