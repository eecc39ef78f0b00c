"""Guess a secret number with higher/lower feedback.

Python twin of the `guess_number` library program (the DESIGN.md section 5 contract). Its
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


class GuessNumberEnv:
  def __init__(self, max_turns=7, low=1, high=100):
    self.max_turns, self.low, self.high = max_turns, low, high
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    self.answer, self.turn = self.rng.randint(self.low, self.high), 0
    return (
      f"I am thinking of an integer between {self.low} and {self.high}. Guess it! "
      f"You have {self.max_turns} guesses. Answer with \\boxed{{N}}."
    ), {}

  def solution(self):
    return f"\\boxed{{{self.answer}}}"

  def step(self, action):
    self.turn += 1
    ints = _boxed_ints(action)
    if ints == [self.answer]:
      return f"Correct! The number was {self.answer}.", 1.0, True, False, {}
    if self.turn >= self.max_turns:
      return f"No guesses left. The number was {self.answer}.", 0.0, False, True, {}
    if ints is None or len(ints) != 1:
      return "Give a single integer in \\boxed{}.", 0.0, False, False, {}
    left = self.max_turns - self.turn
    hint = "higher" if ints[0] < self.answer else "lower"
    return (
      f"Wrong: my number is {hint} than {ints[0]}. Guesses left: {left}.",
      0.0,
      False,
      False,
      {},
    )
