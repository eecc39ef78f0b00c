"""Library programs: patterns, lists, logic and multi-turn games (mirroring `twins/`)."""

from __future__ import annotations

from spade_jax.envs.library.common import ANSWER_N, NO_ANSWER, single_int_tail, words


def sequence(max_turns=3, n_shown=5, order=1, max_start=20, max_step=9) -> str:
  lines = [
    f"turns {max_turns}",
    "reset",
    f"rand r0 -{max_start} {max_start}",
    f"rand r1 -{max_step} {max_step}",
  ]
  lines += ["rand r2 -3 3"] if order == 2 else []
  lines.append("push l0 r0")
  for _ in range(n_shown - 1):
    lines += ["add r0 r0 r1"] + (["add r1 r1 r2"] if order == 2 else []) + ["push l0 r0"]
  lines.append("add r10 r0 r1")
  obs = words("Continue the sequence: ", "$l0", ". What is the next number" + "?" + ANSWER_N[1:])
  hint = words("Look at the differences between neighbours, and at how those differences change.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def argmax(max_turns=3, n=6, max_value=50, smallest=False) -> str:
  lines = [f"turns {max_turns}", "reset"]
  for _ in range(n):
    lines += [f"rand r0 0 {max_value}", "push l0 r0"]
  lines += [f"{'argmin' if smallest else 'argmax'} r10 l0", "add r10 r10 1"]
  which = "smallest" if smallest else "largest"
  obs = words(
    "Here is a list: ",
    "$l0",
    f". At which position (counting from 1) is its {which} "
    "value? If it occurs more than once, give the first position" + ANSWER_N,
  )
  hint = words("Scan once, remembering the best value and where you first saw it.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


_CONNECTIVES = {
  "xor": (["ne r10 r3 r4"], "exactly one of P and Q is true"),
  "and": (["and r10 r3 r4"], "both P and Q are true"),
  "or": (["or r10 r3 r4"], "at least one of P and Q is true"),
  "implies": (["not r5 r3", "or r10 r5 r4"], "P implies Q"),
}


def logic(max_turns=2, max_value=20, connective="xor") -> str:
  code, claim = _CONNECTIVES[connective]
  lines = [
    f"turns {max_turns}",
    "reset",
    *(f"rand r{i} 0 {max_value}" for i in range(3)),
    "gt r3 r0 r1",
    "mod r4 r2 2",
    "eq r4 r4 0",
    *code,
  ]
  obs = words(
    "Let a = ",
    "$r0",
    ", b = ",
    "$r1",
    " and c = ",
    "$r2",
    '. P is the statement "a > b" and Q is the statement "c is even". Is it true that '
    f"{claim}? Answer \\boxed{{1}} for yes or \\boxed{{0}} for no.",
  )
  hint = words("Decide P and Q separately, then combine them.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def missing_number(max_turns=3, n=6) -> str:
  lines = [
    f"turns {max_turns}",
    "reset",
    f"range l0 1 {n + 2}",
    "shuffle l0 l0",
    "get r10 l0 -1",
    "take l1 l0 -1",
  ]
  obs = words(
    f"The numbers from 1 to {n + 1} were shuffled and one was removed: ",
    "$l1",
    ". Which number is missing" + "?" + ANSWER_N[1:],
  )
  hint = words("Compare the sum of the list with the sum of all numbers in the range.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def guess_number(max_turns=7, low=1, high=100) -> str:
  return (
    "\n".join(
      [
        f"turns {max_turns}",
        "reset",
        f"rand r10 {low} {high}",
        "step",
        "eq r20 nguess 1",
        "eq r21 guess r10",
        "and r20 r20 r21",
        "ge r22 turn maxturns",
        "ne r23 nguess 1",
        "lt r24 guess r10",
        "sub r25 maxturns turn",
        "answer r10",
        "obs "
        + words(
          f"I am thinking of an integer between {low} and {high}. Guess it! You have ",
          "$maxturns",
          " guesses" + ANSWER_N,
        ),
        "hint " + words("Guess the middle of the remaining range; every answer halves it."),
        "case r20 1000 stop " + words("Correct! The number was ", "$r10", "."),
        "case r22 0 go " + words("No guesses left. The number was ", "$r10", "."),
        "case r23 0 go " + words("Give a single integer in \\boxed{}."),
        "case r24 0 go "
        + words("Wrong: my number is higher than ", "$guess", ". Guesses left: ", "$r25", "."),
        "case 1 0 go "
        + words("Wrong: my number is lower than ", "$guess", ". Guesses left: ", "$r25", "."),
      ]
    )
    + "\n"
  )


def nim(max_turns=3, max_take=3, max_rounds=10) -> str:
  return (
    "\n".join(
      [
        f"turns {max_turns}",
        "reset",
        f"rand r0 2 {max_take}",
        f"rand r1 1 {max_rounds}",
        "rand r10 1 r0",
        "add r2 r0 1",
        "mul r3 r1 r2",
        "add r3 r3 r10",
        "step",
        "eq r20 nguess 1",
        "eq r21 guess r10",
        "and r20 r20 r21",
        "ge r22 turn maxturns",
        "not r23 found",
        "ge r24 guess 1",
        "le r25 guess r0",
        "and r24 r24 r25",
        "eq r26 nguess 1",
        "and r24 r24 r26",
        "sub r27 r3 guess",
        "answer r10",
        "obs "
        + words(
          "There are ",
          "$r3",
          " stones in a pile. Two players take turns removing between 1 and ",
          "$r0",
          " stones; whoever takes the last stone wins. It is "
          "your move. How many stones should you take to be sure to win" + "?" + ANSWER_N[1:],
        ),
        "hint " + words("Leave your opponent a multiple of (largest take + 1) stones."),
        "case r20 1000 stop "
        + words("Correct! Taking ", "$r10", " leaves a multiple of ", "$r2", "."),
        "case r22 0 go " + words("No turns left. The winning move was to take ", "$r10", "."),
        "case r23 0 go " + words(NO_ANSWER),
        "case r24 0 go "
        + words(
          "Taking ",
          "$guess",
          " leaves ",
          "$r27",
          " stones, and your opponent can win from there. Try again.",
        ),
        "case 1 0 go " + words("That is not a legal move: take between 1 and ", "$r0", " stones."),
      ]
    )
    + "\n"
  )


def sorting(max_turns=3, n=5, max_abs=50, descending=False) -> str:
  lines = [f"turns {max_turns}", "reset"]
  for _ in range(n):
    lines += [f"rand r0 -{max_abs} {max_abs}", "push l0 r0"]
  lines += ["sort l1 l0"] + (["rev l1 l1"] if descending else [])
  order = "descending" if descending else "ascending"
  lines += [
    "step",
    "leq r20 lguess l1",
    "ge r22 turn maxturns",
    "not r23 found",
    "match r21 lguess l1",
    "answer l1",
    "obs "
    + words(
      f"Sort these numbers in {order} order: ",
      "$l0",
      ". Answer with the sorted list, like \\boxed{a, b, c}.",
    ),
    "hint "
    + words(
      "Repeatedly pick the "
      + ("largest" if descending else "smallest")
      + " remaining number; keep duplicates."
    ),
    "case r20 1000 stop " + words("Correct!"),
    "case r22 0 go " + words("Wrong. No turns left. The sorted list was ", "$l1", "."),
    "case r23 0 go " + words(NO_ANSWER),
    "case 1 0 go " + words("Not quite: ", "$r21", f" of {n} positions are correct."),
  ]
  return "\n".join(lines) + "\n"


def mastermind(max_turns=10, length=4, n_digits=6, distinct=False) -> str:
  lines = [f"turns {max_turns}", "reset"]
  if distinct:
    lines += [f"range l2 0 {n_digits}", f"sample l0 l2 {length}"]
  else:
    for _ in range(length):
      lines += [f"rand r0 0 {n_digits - 1}", "push l0 r0"]
  repeats = "all different" if distinct else "repeats allowed"
  lines += [
    "step",
    "leq r20 lguess l0",
    "ge r22 turn maxturns",
    "not r23 found",
    "len r24 lguess",
    f"ne r27 r24 {length}",
    "match r21 lguess l0",
    "sel r26 r27 0 r21",
    "max r9 r9 r26",
    "answer l0",
    "obs "
    + words(
      f"I chose a secret code of {length} digits, each from 0 to {n_digits - 1} "
      f"({repeats}). Guess it as a list, like \\boxed{{1, 2, 3}}. After each guess "
      "I tell you how many digits are in the right place."
    ),
    "hint " + words("Change one position at a time and watch how the count moves."),
    "case r20 1000 stop " + words("Correct! You cracked the code."),
    "case r22 0 go " + words("No turns left. The code was ", "$l0", "."),
    "case r23 0 go " + words(NO_ANSWER),
    "case r27 -100 go " + words(f"Your guess must have exactly {length} digits."),
    "case 1 0 go "
    + words("$r21", f" of {length} digits are in the right place. Best so far: ", "$r9", "."),
  ]
  return "\n".join(lines) + "\n"
