"""Control flow (jmp/jz/jnz, labels, the max_exec fuel), rsample, and several observation
templates picked by obs_select."""

from __future__ import annotations

import dataclasses
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from envs_fixtures import tokenizer

from spade_jax.envs.ir.assembly import AssemblyError, assemble
from spade_jax.envs.ir.checks import CHECKS, check_program, validate_program
from spade_jax.envs.ir.disassembly import disassemble
from spade_jax.envs.ir.draws import DrawRecorder
from spade_jax.envs.ir.interpreter import ProgramEnv
from spade_jax.envs.ir.program import (
  DEFAULT_CONFIG,
  FAULT_CAPACITY,
  FAULT_INDEX,
  FAULT_RANDOM,
  MODE_REG,
  OPCODE,
  STRAIGHT_LINE_OPS,
  ProgramConfig,
  make_action,
  program_from_arrays,
  stack_programs,
)

CFG = dataclasses.replace(DEFAULT_CONFIG, n_obs=3, max_exec=2000)
TAIL = """answer r0
obs "sum"
case 1 0 go "s=" r0
"""
LOOP = (
  """turns 3
reset
step
set r0 0
set r1 200
@loop
jz r1 @done
add r0 r0 r1
sub r1 r1 1
jmp @loop
@done
"""
  + TAIL
)
NUMERIC = (
  "turns 3\nreset\nstep\nset r0 0\nset r1 200\njz r1 6\nadd r0 r0 r1\nsub r1 r1 1\njmp 2\n" + TAIL
)
STRAIGHT = "turns 3\nreset\nstep\nset r0 7\n" + TAIL
FOREVER = "turns 3\nreset\nstep\n@top\nadd r0 r0 1\njnz 1 @top\n" + TAIL


@pytest.fixture(scope="module")
def tok():
  return tokenizer("tiny")


@pytest.fixture(scope="module")
def env():
  return ProgramEnv(CFG)


def _equal(a, b):
  pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b))
  return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in pairs)


def _episode(env, programs, tok, keys=None):
  """jit+vmap reset and one step over stacked programs -> (reset states, step states)."""
  batch = stack_programs(programs)
  n = len(programs)
  keys = jax.random.split(jax.random.key(0), n) if keys is None else keys
  _, state = jax.jit(jax.vmap(env.reset))(keys, batch)
  act = make_action(None, CFG)
  acts = jax.tree.map(lambda x: jnp.stack([jnp.asarray(x)] * n), act)
  out = jax.jit(jax.vmap(env.transition))(keys, state, acts, batch)
  return state, out[1]


def test_loop_sums_under_jit_and_vmap_next_to_a_straight_line_program(env, tok):
  loop, straight = assemble(LOOP, tok, CFG), assemble(STRAIGHT, tok, CFG)
  _, state = _episode(env, [loop, straight, loop], tok)
  assert [int(v) for v in state.regs[:, 0]] == [20100, 7, 20100]
  assert [int(f) for f in state.fault] == [0, 0, 0]


def test_labels_and_numeric_targets_assemble_alike_and_round_trip(tok):
  a, b = assemble(LOOP, tok, CFG), assemble(NUMERIC, tok, CFG)
  assert _equal(a, b)
  text = disassemble(a, tok, CFG)
  assert "jz r1 6" in text and "jmp 2" in text and "@" not in text
  assert _equal(assemble(text, tok, CFG), a)


def test_loop_without_exit_runs_out_of_fuel(env, tok):
  _, state = _episode(env, [assemble(FOREVER, tok, CFG)], tok)
  assert int(state.fault[0]) & FAULT_CAPACITY
  assert int(state.regs[0, 0]) == CFG.max_exec // 2  # add, jnz, add, jnz ...


@pytest.mark.parametrize(
  "text, fragment",
  [
    (LOOP.replace("jmp @loop", "jmp 7"), "operand out of range"),
    (LOOP.replace("jmp @loop", "jmp -1"), "operand out of range"),
    (LOOP.replace("jmp @loop", "jmp r1"), "jump target"),
    (LOOP.replace("jmp @loop", "jmp @nowhere"), "unknown label @nowhere"),
    (LOOP.replace("@done\n", "@loop\n"), "label @loop defined twice"),
  ],
)
def test_bad_targets_and_labels_name_the_line(tok, text, fragment):
  with pytest.raises(AssemblyError, match=fragment) as e:
    assemble(text, tok, CFG)
  assert str(e.value).startswith("line ")


def test_check_program_rejects_register_and_out_of_range_targets(tok):
  good = assemble(LOOP, tok, CFG)
  assert int(check_program(good, CFG, np)[0]) == 0
  for col, val, msg in ((5, 7, "operand out of range"), (4, MODE_REG, "operand mode")):
    code = np.array(good.step_code)
    code[2, col] = val  # jz r1 T: T out of range / T read from a register
    code_, where = check_program(good.replace(step_code=code), CFG, np)
    assert msg in CHECKS[int(code_)] and int(where) == 2
  # The end of the section (6 instructions) is a valid target; 7 is not.
  code = np.array(good.step_code)
  code[5, 3] = 6
  assert int(check_program(good.replace(step_code=code), CFG, np)[0]) == 0


def test_tiny_designer_does_not_see_the_new_opcodes():
  assert OPCODE["rsample"] == len(STRAIGHT_LINE_OPS)
  assert not {"rsample", "jmp", "jz", "jnz"} & set(STRAIGHT_LINE_OPS)


RSAMPLE = 'turns 3\nreset\nrsample l0 A B K\nstep\nanswer l0\nobs l0\ncase 1 0 go "x"\n'


def _rsample(tok, a, b, k):
  return assemble(RSAMPLE.replace("A", str(a)).replace("B", str(b)).replace("K", str(k)), tok, CFG)


def _reset_many(env, program, n, tape=None, tape_len=0):
  keys = jax.random.split(jax.random.key(3), n)
  tape = np.zeros((n, CFG.n_draws), np.int32) if tape is None else tape
  fn = jax.jit(jax.vmap(env.reset_with_tape, in_axes=(0, None, 0, 0)))
  _, state = fn(keys, program, tape, np.full(n, tape_len, np.int32))
  return jax.device_get(state)


def test_rsample_own_draws_are_distinct_in_range_and_logged_as_indices(env, tok):
  a, b, k = -5, 2**20 - 5, 12
  state = _reset_many(env, _rsample(tok, a, b, k), 16)
  seen = set()
  for i in range(16):
    vals = [int(v) for v in state.lists[i, 0, : state.list_len[i, 0]]]
    assert len(vals) == k and len(set(vals)) == k and all(a <= v < b for v in vals)
    assert [int(d) for d in state.draws[i, :k]] == [v - a for v in vals]
    assert int(state.n_draws[i]) == k and int(state.fault[i]) == 0
    seen.add(tuple(vals))
  assert len(seen) == 16  # different keys, different samples
  # A population barely larger than k: still a permutation of distinct values.
  state = _reset_many(env, _rsample(tok, 10, 22, 12), 8)
  for i in range(8):
    assert sorted(int(v) for v in state.lists[i, 0, :12]) == list(range(10, 22))


def test_rsample_replays_python_draws(env, tok):
  a, b, k = 100, 100 + 2**20, 5
  tapes, want = np.zeros((4, CFG.n_draws), np.int32), []
  for i in range(4):
    rec = DrawRecorder(i)
    want.append(rec.sample(range(a, b), k))
    assert want[-1] == random.Random(i).sample(range(a, b), k)
    tapes[i, :k] = rec.tape
  state = _reset_many(env, _rsample(tok, a, b, k), 4, tapes, k)
  for i in range(4):
    assert [int(v) for v in state.lists[i, 0, :k]] == want[i]
    assert int(state.fault[i]) == 0


@pytest.mark.parametrize(
  "tape, fault",
  [([1, 2, 1], FAULT_RANDOM), ([0, 50, 1], FAULT_RANDOM), ([0, -1, 1], FAULT_RANDOM)],
)
def test_rsample_rejects_bad_replayed_indices(env, tok, tape, fault):
  t = np.zeros((1, CFG.n_draws), np.int32)
  t[0, :3] = tape
  state = _reset_many(env, _rsample(tok, 0, 50, 3), 1, t, 3)
  assert int(state.fault[0]) & fault


def test_rsample_size_faults(env, tok):
  assert int(_reset_many(env, _rsample(tok, 0, 3, 4), 1).fault[0]) == FAULT_INDEX  # k > b - a
  assert int(_reset_many(env, _rsample(tok, 5, 3, 1), 1).fault[0]) == FAULT_INDEX  # empty
  assert int(_reset_many(env, _rsample(tok, 0, 3, -1), 1).fault[0]) == FAULT_INDEX
  assert int(_reset_many(env, _rsample(tok, 0, 99, 13), 1).fault[0]) == FAULT_CAPACITY
  state = _reset_many(env, _rsample(tok, 5, 3, 0), 1)  # Python: sample(range(5, 3), 0) == []
  assert int(state.fault[0]) == 0 and int(state.list_len[0, 0]) == 0


OBS = """turns 3
reset
set r2 SEL
step
answer r0
obssel r2
obs "zero"
obs "one " r2
obs "two"
case 1 0 go "x"
"""


def _obs_text(env, tok, sel):
  program = assemble(OBS.replace("SEL", str(sel)), tok, CFG)
  obs, state = jax.jit(env.reset)(jax.random.key(0), program)
  return tok.decode([int(i) for i in obs.ids[: int(obs.length)]]), int(state.fault)


def test_obssel_picks_the_observation_template(env, tok):
  assert _obs_text(env, tok, 0) == ("zero", 0)
  assert _obs_text(env, tok, 1) == ("one 1", 0)
  assert _obs_text(env, tok, 2) == ("two", 0)
  assert _obs_text(env, tok, 3) == ("zero", FAULT_INDEX)
  assert _obs_text(env, tok, -1) == ("zero", FAULT_INDEX)


def test_obs_alternatives_round_trip_and_limits(tok):
  program = assemble(OBS.replace("SEL", "1"), tok, CFG)
  text = disassemble(program, tok, CFG)
  assert 'obssel r2\nobs "zero"\nobs "one " r2\nobs "two"\n' in text
  assert _equal(assemble(text, tok, CFG), program)
  imm = assemble(OBS.replace("obssel r2", "obssel 0").replace("SEL", "1"), tok, CFG)
  assert [int(v) for v in imm.obs_select] == [1, 0]  # MODE_IMM, 0: printed back as 'obssel 0'
  assert "obssel 0" in disassemble(imm, tok, CFG)
  with pytest.raises(AssemblyError, match="more than 1 observation templates"):
    assemble(OBS.replace("SEL", "1"), tok, ProgramConfig())


def test_arrays_saved_without_obs_select_load(tok):
  program = assemble(STRAIGHT, tok)
  old = {k: np.asarray(v) for k, v in vars(program).items() if k != "obs_select"}
  loaded = program_from_arrays(old)
  assert [int(v) for v in loaded.obs_select] == [0, 0]
  validate_program(loaded, DEFAULT_CONFIG)
  batch = {k: np.stack([v, v]) for k, v in old.items()}
  assert program_from_arrays(batch).obs_select.shape == (2, 2)
