"""Shared pieces of the library programs: template words and the standard answer check."""

from __future__ import annotations

import json

NO_ANSWER = "No answer found. Put your final answer in \\boxed{}."
ANSWER_N = ". Answer with \\boxed{N}."


def words(*parts: str) -> str:
  """Template words: parts starting with ``$`` are register names, the rest literal text."""
  return " ".join(p[1:] if p.startswith("$") else json.dumps(p, ensure_ascii=False) for p in parts)


def single_int_tail(answer: str, obs: str, hint: str) -> str:
  """Step code + cases of a single-int task with the standard feedback (the twins' `step`):
  correct -> reward 1 and stop; out of turns -> reveal; no answer -> ask for \\boxed{};
  otherwise "try again"."""
  return (
    "\n".join(
      [
        "step",
        "eq r20 nguess 1",
        f"eq r21 guess {answer}",
        "and r20 r20 r21",
        "ge r22 turn maxturns",
        "not r23 found",
        f"answer {answer}",
        f"obs {obs}",
        f"hint {hint}",
        f"case r20 1000 stop {words('Correct!')}",
        f"case r22 0 go {words('Wrong. No turns left. The answer was ', '$' + answer, '.')}",
        f"case r23 0 go {words(NO_ANSWER)}",
        f"case 1 0 go {words('Wrong answer. Try again.')}",
      ]
    )
    + "\n"
  )
