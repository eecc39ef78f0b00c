"""The interpreter: every opcode against a Python reference, checked arithmetic, draws and
tapes, case selection, the gymnax contract, and one compilation for any program."""

from __future__ import annotations

import math
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from envs_fixtures import B, reset_batch, step_batch, tokenizer

from spade_jax.envs.ir.assembly import assemble
from spade_jax.envs.ir.interpreter import ProgramEnv, fault_names
from spade_jax.envs.ir.program import (
  DEFAULT_CONFIG,
  FAULT_CAPACITY,
  FAULT_INDEX,
  FAULT_OVERFLOW,
  FAULT_RANDOM,
  FAULT_REWARD,
  FAULT_ZERO_DIV,
  MODE_IMM,
  MODE_LIST,
  MODE_REG,
  OPCODE,
  OPS,
  STRAIGHT_LINE_OPS,
  make_action,
  stack_programs,
)
from spade_jax.envs.library import FAMILIES

CFG = DEFAULT_CONFIG
LO, HI = -(2**31), 2**31 - 1
BASE = """turns 3
reset
step
answer r5
obs "value " r5
case found 1000 stop "ok " r5
case 1 0 go "no"
"""
# Control flow and rsample are covered in test_ir_control.py.
DETERMINISTIC = [
  n for n in STRAIGHT_LINE_OPS if n not in ("nop", "rand", "choice", "shuffle", "sample")
]


@pytest.fixture(scope="module")
def base():
  return assemble(BASE, tokenizer("tiny"))


def _box(guess):
  return "nothing" if guess is None else "\\boxed{" + ", ".join(map(str, guess)) + "}"


# ------------------------------------------------------------------------ Python reference
def _py_index(i, n):
  j = i + n if i < 0 else i
  return j if 0 <= j < n else None


def reference(name, a, b, c, la, lb, ld):
  """Python semantics of one opcode -> (result, fault bits); result is an int or a list."""
  fits = lambda v: LO <= v <= HI
  ovf = lambda v: (v, 0 if fits(v) else FAULT_OVERFLOW)
  if name in ("add", "sub", "mul"):
    return ovf({"add": a + b, "sub": a - b, "mul": a * b}[name])
  if name in ("div", "mod"):
    if b == 0:
      return None, FAULT_ZERO_DIV
    return ovf(a // b if name == "div" else a % b)
  simple = {
    "set": lambda: a,
    "neg": lambda: -a,
    "abs": lambda: abs(a),
    "min": lambda: min(a, b),
    "max": lambda: max(a, b),
    "eq": lambda: int(a == b),
    "ne": lambda: int(a != b),
    "lt": lambda: int(a < b),
    "le": lambda: int(a <= b),
    "gt": lambda: int(a > b),
    "ge": lambda: int(a >= b),
    "and": lambda: int(bool(a) and bool(b)),
    "or": lambda: int(bool(a) or bool(b)),
    "not": lambda: int(not a),
    "sel": lambda: b if a else c,
    "gcd": lambda: math.gcd(a, b),
    "len": lambda: len(la),
    "sum": lambda: sum(la),
    "count": lambda: la.count(b),
    "match": lambda: sum(x == y for x, y in zip(la, lb)),
    "leq": lambda: int(la == lb),
  }
  if name in simple:
    return ovf(simple[name]())
  if name in ("lmin", "lmax", "argmin", "argmax"):
    if not la:
      return None, FAULT_INDEX
    best = min(la) if name in ("lmin", "argmin") else max(la)
    return (best if name in ("lmin", "lmax") else la.index(best)), 0
  if name == "find":
    return (la.index(b), 0) if b in la else (None, FAULT_INDEX)
  if name == "get":
    j = _py_index(b, len(la))
    return (la[j], 0) if j is not None else (None, FAULT_INDEX)
  if name == "dot":
    prods = [x * y for x, y in zip(la, lb)]
    return sum(prods), 0 if all(map(fits, prods)) and fits(sum(prods)) else FAULT_OVERFLOW
  if name == "lset":
    j = _py_index(a, len(ld))
    if j is None:
      return None, FAULT_INDEX
    return ld[:j] + [b] + ld[j + 1 :], 0
  if name == "push":
    return (ld + [a], 0) if len(ld) < CFG.list_len else (None, FAULT_CAPACITY)
  if name == "range":
    if b - a > CFG.list_len:
      return None, FAULT_CAPACITY
    return list(range(a, b)), 0
  if name == "digits":
    return ([int(ch) for ch in str(a)], 0) if a >= 0 else (None, FAULT_INDEX)
  return {"clear": [], "copy": la, "sort": sorted(la), "rev": la[::-1], "take": la[:b]}[name], 0


def _value(rng: random.Random) -> int:
  r = rng.random()
  if r < 0.6:
    return rng.randint(-20, 20)
  if r < 0.8:
    return rng.choice([LO, HI, LO + 1, HI - 1, 0, -1, 1, 65536, 46341, -46341, 10**9])
  return rng.randint(LO, HI)


def _list(rng: random.Random) -> list[int]:
  n = rng.choice([0, 1, 2, 3, 5, 8, CFG.list_len, rng.randint(0, CFG.list_len)])
  small = rng.random() < 0.7
  return [rng.randint(-5, 5) if small else _value(rng) for _ in range(n)]


def _row(op, dst=0, *operands):
  row = np.zeros(8, np.int32)
  row[0], row[1] = OPCODE[op], dst
  for j, (mode, val) in enumerate(operands):
    row[2 + 2 * j], row[3 + 2 * j] = mode, val
  return row


def _program(base, rows):
  code = np.zeros_like(np.asarray(base.reset_code))
  code[: len(rows)] = rows
  return base.replace(reset_code=code)


def _setup_rows(a, b, c, la, lb, ld):
  rows = [_row("set", i, (MODE_IMM, v)) for i, v in enumerate((a, b, c))]
  for li, vals in enumerate((la, lb, ld)):
    rows += [_row("push", li, (MODE_IMM, v)) for v in vals]
  return rows


def _op_row(name):
  dst_kind, kinds = OPS[name]
  operands = [(MODE_REG, j) if k == "S" else (MODE_LIST, j) for j, k in enumerate(kinds)]
  return _row(name, 5 if dst_kind == "r" else 2, *operands)


def test_every_deterministic_opcode_matches_python(base):
  rng = random.Random(0)
  samples, programs = [], []
  for name in DETERMINISTIC:
    for _ in range(64):
      args = (_value(rng), _value(rng), _value(rng), _list(rng), _list(rng), _list(rng))
      if name in ("take", "get", "lset", "range") and rng.random() < 0.7:
        args = (rng.randint(-14, 14), rng.randint(-14, 14), *args[2:])
      samples.append((name, args))
      programs.append(_program(base, _setup_rows(*args) + [_op_row(name)]))
  for start in range(0, len(programs), B):
    _, st, _ = reset_batch(programs[start : start + B])
    regs, lists, lens = np.asarray(st.regs), np.asarray(st.lists), np.asarray(st.list_len)
    fault = np.asarray(st.fault)
    for i, (name, args) in enumerate(samples[start : start + B]):
      want, want_fault = reference(name, *args)
      assert fault[i] == want_fault, (name, args, fault_names(fault[i]))
      if want_fault:
        continue
      got = list(lists[i, 2, : lens[i, 2]]) if OPS[name][0] == "l" else int(regs[i, 5])
      assert got == want, (name, args)


def test_checked_arithmetic_flags_overflow_only_when_python_would_leave_int32(base):
  cases = [  # (rows, expected fault)
    ([_row("add", 0, (MODE_IMM, HI), (MODE_IMM, 1))], FAULT_OVERFLOW),
    ([_row("sub", 0, (MODE_IMM, LO), (MODE_IMM, 1))], FAULT_OVERFLOW),
    ([_row("mul", 0, (MODE_IMM, 65536), (MODE_IMM, 32768))], FAULT_OVERFLOW),
    ([_row("mul", 0, (MODE_IMM, -65536), (MODE_IMM, 32768))], 0),  # exactly INT32_MIN
    ([_row("div", 0, (MODE_IMM, LO), (MODE_IMM, -1))], FAULT_OVERFLOW),
    ([_row("mod", 0, (MODE_IMM, LO), (MODE_IMM, -1))], 0),
    ([_row("mod", 0, (MODE_IMM, 5), (MODE_IMM, 0))], FAULT_ZERO_DIV),
    (
      [
        _row("push", 0, (MODE_IMM, HI)),
        _row("push", 0, (MODE_IMM, 1)),
        _row("push", 0, (MODE_IMM, -1)),
        _row("sum", 0, (MODE_LIST, 0)),
      ],
      0,
    ),  # exact sum
    (
      [
        _row("push", 0, (MODE_IMM, HI)),
        _row("push", 0, (MODE_IMM, 1)),
        _row("sum", 0, (MODE_LIST, 0)),
      ],
      FAULT_OVERFLOW,
    ),
    ([_row("gcd", 0, (MODE_IMM, LO), (MODE_IMM, 0))], FAULT_OVERFLOW),
  ]
  programs = [_program(base, rows) for rows, _ in cases]
  # Faults are sticky: a later valid instruction does not clear them.
  programs.append(_program(base, cases[0][0] + [_row("set", 1, (MODE_IMM, 3))]))
  _, st, _ = reset_batch(programs)
  assert list(np.asarray(st.fault)[: len(cases)]) == [f for _, f in cases]
  assert int(st.fault[len(cases)]) == FAULT_OVERFLOW and int(st.regs[len(cases), 1]) == 3


def test_draws_are_in_range_logged_and_replayable(base):
  rows = [
    _row("rand", 0, (MODE_IMM, -3), (MODE_IMM, 4)),
    _row("range", 0, (MODE_IMM, 10), (MODE_IMM, 17)),
    _row("choice", 1, (MODE_LIST, 0)),
    _row("shuffle", 1, (MODE_LIST, 0)),
    _row("sample", 2, (MODE_LIST, 0), (MODE_IMM, 3)),
  ]
  prog = _program(base, rows)
  seen = set()
  for seed in range(2):
    _, st, _ = reset_batch([prog] * B, seed=seed)
    regs, lists, lens = np.asarray(st.regs), np.asarray(st.lists), np.asarray(st.list_len)
    draws, n_draws = np.asarray(st.draws), np.asarray(st.n_draws)
    assert not np.asarray(st.fault).any()
    assert np.all(n_draws == 1 + 1 + 7 + 3)
    seen |= set(regs[:, 0])
    base_list = list(range(10, 17))
    for i in range(B):
      assert draws[i, 0] == regs[i, 0]  # rand logs the value
      assert regs[i, 1] == base_list[draws[i, 1]]  # choice logs the index
      perm = list(draws[i, 2:9])  # shuffle logs new[i] = old[perm[i]]
      assert sorted(perm) == list(range(7))
      assert list(lists[i, 1, :7]) == [base_list[p] for p in perm]
      idx = list(draws[i, 9:12])  # sample logs the chosen indices
      assert len(set(idx)) == 3 and list(lists[i, 2, : lens[i, 2]]) == [base_list[j] for j in idx]
    # Replaying the log as a tape reproduces the episode under another key.
    _, st2, _ = reset_batch([prog] * B, [d[:n] for d, n in zip(draws, n_draws)], seed=99)
    np.testing.assert_array_equal(np.asarray(st2.lists), lists)
    np.testing.assert_array_equal(np.asarray(st2.regs), regs)
  assert seen == set(range(-3, 5))  # every value of the range shows up
  # Bad tapes and empty ranges are faults, never silently used.
  empty = _program(
    base, [_row("set", 0, (MODE_IMM, 5)), _row("rand", 1, (MODE_REG, 0), (MODE_IMM, 4))]
  )
  _, st, _ = reset_batch([prog, prog, prog, empty], [[9], [0, 7], [0, 0, 0, 0, 0, 0, 0, 0, 0]])
  assert [int(f) & FAULT_RANDOM for f in np.asarray(st.fault)[:4]] == [FAULT_RANDOM] * 4


def test_step_cases_rewards_and_done_episodes():
  tok = tokenizer("tiny")
  prog = assemble(
    """turns 2
reset
set r1 1500
step
eq r2 guess 7
eq r3 guess 8
answer r1
obs "go"
case r2 r1 stop "too much reward"
case r3 -250 go "minus"
""",
    tok,
  )
  _, st, _ = reset_batch([prog])
  text = lambda o, i: tok.decode(np.asarray(o.ids[i][: o.length[i]]))
  # Lane 0: no case matches, then the last turn (truncated), then stepping a done episode.
  # Lane 1: the reward register holds 1500 (out of range: clipped, fault).
  o, s1, r, te, tr, info = step_batch(st, [prog], [_box([1]), _box([7])])
  assert (int(o.length[0]), float(r[0]), bool(te[0]), bool(tr[0])) == (0, 0.0, False, False)
  assert int(info["case"][0]) == -1
  assert float(r[1]) == 1.0 and bool(te[1]) and int(info["fault"][1]) & FAULT_REWARD
  o, s2, r, te, tr, info = step_batch(s1, [prog], [_box([8])])
  assert text(o, 0) == "minus" and float(r[0]) == np.float32(-0.25)
  assert (bool(te[0]), bool(tr[0]), int(info["case"][0])) == (False, True, 1)
  o, s3, r, te, tr, info = step_batch(s2, [prog], [_box([7])])
  assert (int(o.length[0]), float(r[0]), bool(te[0]), bool(tr[0])) == (0, 0.0, False, True)
  assert int(s3.time[0]) == int(s2.time[0]) == 2


def test_gymnax_contract_with_auto_reset():
  tok = tokenizer("tiny")
  env = ProgramEnv(CFG)
  prog = FAMILIES["guess_number"].build(tok)
  obs, st = env.reset(jax.random.key(0), prog)
  answer = int(st.regs[10])
  out = env.step(jax.random.key(1), st, make_action([answer], CFG), prog)
  assert len(out) == 6
  obs2, st2, r, te, tr, info = out
  assert float(r) == 1.0 and bool(te) and not bool(tr)
  final = info["final_observation"]
  assert tok.decode(final.ids[: final.length]) == f"Correct! The number was {answer}."
  assert int(st2.time) == 0 and not bool(st2.terminated)  # auto-reset to a fresh episode
  assert tok.decode(obs2.ids[: obs2.length]).startswith("I am thinking of an integer")
  with pytest.raises(TypeError, match="no default program"):
    env.reset(jax.random.key(0))


def test_one_compilation_serves_any_program_mix():
  tok = tokenizer("tiny")
  env = ProgramEnv(CFG)
  traces = []

  def episode(keys, programs, guesses):
    traces.append(1)  # runs only while tracing
    obs, st = jax.vmap(env.reset)(keys, programs)
    actions = jax.vmap(
      lambda g: make_action([0], CFG)._replace(
        values=jnp.zeros(CFG.list_len, jnp.int32).at[0].set(g)
      )
    )(guesses)
    return obs, jax.vmap(env.transition)(keys, st, actions, programs)

  run = jax.jit(episode)
  names = sorted(FAMILIES)
  for level in (0, 1, 2):  # a batch mixing every family; new programs on every call
    programs = stack_programs([FAMILIES[n].build(tok, **FAMILIES[n].levels[level]) for n in names])
    keys = jax.random.split(jax.random.key(level), len(names))
    obs, (fb, st, r, te, tr, info) = run(keys, programs, jnp.arange(len(names)))
    assert np.all(np.asarray(obs.length) > 0) and np.all(np.asarray(fb.length) > 0)
    assert not np.asarray(info["fault"]).any()
  assert len(traces) == 1


def test_render_overflow_is_a_fault():
  prog = assemble(
    """turns 1
reset
range l0 100000 100012
step
answer r0
obs l0 l0 l0 l0
case 1 0 go "x"
""",
    tokenizer("tiny"),
  )
  obs, st, _ = reset_batch([prog])
  assert int(obs.length[0]) == CFG.obs_len and int(st.fault[0]) & FAULT_CAPACITY
