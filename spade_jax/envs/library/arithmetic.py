"""Library programs: arithmetic families (each mirrors `twins/<name>.py` exactly)."""

from __future__ import annotations

from spade_jax.envs.library.common import ANSWER_N, single_int_tail, words

_OPCODE = {"+": "add", "-": "sub", "*": "mul"}


def arith_chain(max_turns=3, n_terms=3, max_value=20, ops="+*-") -> str:
  lines = [f"turns {max_turns}", "reset"]
  lines += [f"rand r{i} 1 {max_value}" for i in range(n_terms)]
  lines.append("set r10 r0")
  parts = ["Compute " + "(" * (n_terms - 2), "$r0"]
  for i in range(1, n_terms):
    op = ops[(i - 1) % len(ops)]
    lines.append(f"{_OPCODE[op]} r10 r10 r{i}")
    parts += [f" {op} ", f"$r{i}"] + ([")"] if i < n_terms - 1 else [])
  obs = words(*parts, ANSWER_N)
  hint = words("Evaluate the innermost parentheses first, then work outwards.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def modular(max_turns=3, max_abs=50, max_mod=13) -> str:
  lines = [
    f"turns {max_turns}",
    "reset",
    *(f"rand r{i} -{max_abs} {max_abs}" for i in range(3)),
    f"rand r3 2 {max_mod}",
    "mul r4 r0 r1",
    "add r4 r4 r2",
    "mod r10 r4 r3",
    "sub r5 r3 1",
  ]
  obs = words(
    "What is (",
    "$r0",
    " * ",
    "$r1",
    " + ",
    "$r2",
    ") mod ",
    "$r3",
    "? The result must be between 0 and ",
    "$r5",
    ANSWER_N,
  )
  hint = words("Compute a * b + c first, then take the remainder; it is never negative.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def counting(max_turns=3, max_abs=60, max_k=9) -> str:
  lines = [
    f"turns {max_turns}",
    "reset",
    f"rand r0 -{max_abs} {max_abs}",
    f"rand r1 0 {2 * max_abs}",
    "add r1 r0 r1",
    f"rand r2 2 {max_k}",
    "div r3 r1 r2",
    "sub r4 r0 1",
    "div r4 r4 r2",
    "sub r10 r3 r4",
  ]
  obs = words(
    "How many integers x with ",
    "$r0",
    " <= x <= ",
    "$r1",
    " are divisible by ",
    "$r2",
    "?" + ANSWER_N[1:],
  )
  hint = words("Count multiples up to b and subtract those below a, using floor division.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def digit_sum(max_turns=3, n_digits=5) -> str:
  lines = [
    f"turns {max_turns}",
    "reset",
    f"rand r0 {10 ** (n_digits - 1)} {10**n_digits - 1}",
    "digits l0 r0",
    "sum r10 l0",
  ]
  obs = words("What is the sum of the digits of ", "$r0", "?" + ANSWER_N[1:])
  hint = words("Add the digits one at a time from left to right.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def gcd_lcm(max_turns=3, max_factor=12, max_mult=15, mode="gcd") -> str:
  table = " ".join(str(v) for v in range(2, max_factor + 1))
  lines = [
    f"turns {max_turns}",
    f"table t0 {table}",
    "reset",
    "choice r0 t0",
    f"rand r1 1 {max_mult}",
    "mul r1 r1 r0",
    f"rand r2 1 {max_mult}",
    "mul r2 r2 r0",
    "gcd r3 r1 r2",
  ]
  lines += ["set r10 r3"] if mode == "gcd" else ["div r10 r1 r3", "mul r10 r10 r2"]
  what = "greatest common divisor" if mode == "gcd" else "least common multiple"
  obs = words(f"What is the {what} of ", "$r1", " and ", "$r2", "?" + ANSWER_N[1:])
  hint = words("Use Euclid's algorithm; the lcm is a * b divided by the gcd.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def weighted_sum(max_turns=3, n=3, max_weight=9, max_value=20) -> str:
  lines = [f"turns {max_turns}", "reset"]
  for _ in range(n):
    lines += [f"rand r0 1 {max_weight}", "push l0 r0"]
  for _ in range(n):
    lines += [f"rand r0 -{max_value} {max_value}", "push l1 r0"]
  lines.append("dot r10 l0 l1")
  obs = words(
    "Weights: ",
    "$l0",
    ". Values: ",
    "$l1",
    ". Multiply each value by its weight and add the products" + ANSWER_N,
  )
  hint = words("Pair the i-th weight with the i-th value; watch the signs.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)


def linear(max_turns=3, max_coef=9, max_x=20) -> str:
  lines = [
    f"turns {max_turns}",
    "reset",
    f"rand r0 -{max_x} {max_x}",
    f"rand r1 1 {max_coef}",
    "rand r2 0 1",
    "eq r3 r2 0",
    "neg r4 r1",
    "sel r1 r3 r4 r1",
    "rand r5 -50 50",
    "mul r6 r1 r0",
    "add r6 r6 r5",
    "set r10 r0",
  ]
  obs = words("Solve for x: ", "$r1", " * x + ", "$r5", " = ", "$r6", ". Answer with \\boxed{x}.")
  hint = words("Subtract b from both sides, then divide by a.")
  return "\n".join(lines) + "\n" + single_int_tail("r10", obs, hint)
