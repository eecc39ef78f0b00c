"""Single-pile subtraction game: find the winning move.

Python twin of the `nim` library program (the DESIGN.md section 5 contract). Its
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


class NimEnv:
  def __init__(self, max_turns=3, max_take=3, max_rounds=10):
    self.max_turns, self.max_take, self.max_rounds = max_turns, max_take, max_rounds
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    self.k = self.rng.randint(2, self.max_take)
    rounds = self.rng.randint(1, self.max_rounds)
    self.answer = self.rng.randint(1, self.k)
    self.stones, self.turn = rounds * (self.k + 1) + self.answer, 0
    return (
      f"There are {self.stones} stones in a pile. Two players take turns removing between "
      f"1 and {self.k} stones; whoever takes the last stone wins. It is your move. How "
      "many stones should you take to be sure to win? Answer with \\boxed{N}."
    ), {}

  def solution(self):
    return f"\\boxed{{{self.answer}}}"

  def step(self, action):
    self.turn += 1
    ints = _boxed_ints(action)
    if ints == [self.answer]:
      return (
        f"Correct! Taking {self.answer} leaves a multiple of {self.k + 1}.",
        1.0,
        True,
        False,
        {},
      )
    if self.turn >= self.max_turns:
      return f"No turns left. The winning move was to take {self.answer}.", 0.0, False, True, {}
    if ints is None:
      return NO_ANSWER, 0.0, False, False, {}
    if len(ints) == 1 and 1 <= ints[0] <= self.k:
      return (
        (
          f"Taking {ints[0]} leaves {self.stones - ints[0]} stones, and your opponent can "
          "win from there. Try again."
        ),
        0.0,
        False,
        False,
        {},
      )
    return f"That is not a legal move: take between 1 and {self.k} stones.", 0.0, False, False, {}
