"""`check_program`: the same verdicts on the host (numpy) and on device (jit + vmap)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from envs_fixtures import tokenizer

from spade_jax.envs.ir.checks import CHECKS, ProgramError, check_program, validate_program
from spade_jax.envs.ir.program import (
  DEFAULT_CONFIG,
  MODE_IMM,
  MODE_REG,
  MODE_TABLE,
  OPCODE,
  TPL_CASE0,
  EnvProgram,
  stack_programs,
)
from spade_jax.envs.library import FAMILIES

CFG = DEFAULT_CONFIG


@pytest.fixture(scope="module")
def valid():
  tok = tokenizer("tiny")
  return [f.build(tok, **lv) for f in FAMILIES.values() for lv in f.levels]


@pytest.fixture(scope="module")
def device_check():
  vocab = tokenizer("tiny").vocab_size
  return jax.jit(jax.vmap(lambda p: check_program(p, CFG, jnp, vocab)))


def _host(p):
  code, where = check_program(p, CFG, np, tokenizer("tiny").vocab_size)
  return int(code), int(where)


def _set(p: EnvProgram, field: str, index, value) -> EnvProgram:
  arr = np.array(getattr(p, field))
  arr[index] = value
  return p.replace(**{field: arr})


def _corruptions(p: EnvProgram):
  """(name, corrupted program, expected message prefix) -- one defect each."""
  n = int(np.sum(np.asarray(p.reset_code)[:, 0] != 0))
  vocab = tokenizer("tiny").vocab_size
  return [
    ("opcode", _set(p, "reset_code", (0, 0), 99), "reset instruction 0: unknown opcode"),
    (
      "read-only dst",
      _set(p, "step_code", (0, 1), CFG.n_regs + 2),
      "step instruction 0: bad destination",
    ),
    (
      "list operand in scalar slot",
      _set(p, "reset_code", (0, 2), 3),
      "reset instruction 0: operand mode",
    ),
    (
      "register range",
      _set(_set(p, "reset_code", (0, 2), MODE_REG), "reset_code", (0, 3), CFG.n_regfile + 3),
      "reset instruction 0: operand out of range",
    ),
    (
      "empty rand",
      _set(p, "reset_code", 0, [OPCODE["rand"], 0, MODE_IMM, 5, MODE_IMM, 4, 0, 0]),
      "reset instruction 0: empty random",
    ),
    (
      "choice from empty table",
      _set(p, "reset_code", 0, [OPCODE["choice"], 0, MODE_TABLE, 3, 0, 0, 0, 0]),
      "reset instruction 0: empty random",
    ),
    (
      "nop in the middle",
      _set(p, "reset_code", n + 1, [OPCODE["set"], 0, MODE_IMM, 1, 0, 0, 0, 0]),
      f"reset code: instruction {n + 1} follows a nop",
    ),
    ("table padding", _set(p, "tables", (3, 5), 1), "table 3:"),
    ("max_turns", p.replace(max_turns=np.int32(0)), "max_turns"),
    ("n_cases", p.replace(n_cases=np.int32(0)), "n_cases"),
    ("stop flag", _set(p, "cases", (0, 4), 3), "case 0: bad"),
    ("reward", _set(p, "cases", (0, 3), 5000), "case 0: immediate reward"),
    ("answer", _set(p, "answer", 1, CFG.n_regs), "answer:"),
    ("token id", _set(p, "tpl_ids", (0, 0), vocab), "template 0: token id"),
    (
      "slot order",
      _set(p, "tpl_slots", (0, 0, 2), int(np.asarray(p.tpl_len)[0]) + 1),
      "template 0: bad number slot",
    ),
    ("tail length", _set(p, "tpl_tail_len", (0, 0, 0), CFG.tail_len + 1), "template 0: sign tail"),
    (
      "unused case template",
      _set(p, "tpl_len", TPL_CASE0 + CFG.n_cases - 1, 1),
      f"template {TPL_CASE0 + CFG.n_cases - 1}: belongs to an unused case",
    ),
    ("digit ids", _set(p, "digit_ids", 3, -1), "tokenizer tables"),
  ]


def test_library_programs_are_valid_on_host_and_device(valid, device_check):
  for p in valid:
    assert _host(p) == (0, 0)
    validate_program(p, CFG)
  codes, _ = device_check(stack_programs(valid))
  assert not np.asarray(codes).any()


def test_each_defect_is_named_identically_on_host_and_device(valid, device_check):
  base = FAMILIES["modular"].build(tokenizer("tiny"))  # 1 slot in the obs, 4 cases, no tables
  corrupt = _corruptions(base)
  host = [_host(p) for _, p, _ in corrupt]
  for (name, p, prefix), (code, where) in zip(corrupt, host):
    msg = CHECKS[code].format(where=where)
    assert msg.startswith(prefix), (name, msg)
    with pytest.raises(ProgramError, match="^" + prefix.split(":")[0]):
      validate_program(p, CFG, tokenizer("tiny").vocab_size)
  dev_code, dev_where = device_check(stack_programs([p for _, p, _ in corrupt]))
  assert list(zip(np.asarray(dev_code).tolist(), np.asarray(dev_where).tolist())) == host


def test_random_mutations_agree_between_host_and_device(valid, device_check):
  rng = np.random.default_rng(0)
  fields = [f.name for f in dataclasses.fields(EnvProgram)]
  mutated = []
  for i in range(256):
    p = valid[i % len(valid)]
    for _ in range(rng.integers(1, 3)):
      name = fields[rng.integers(len(fields))]
      arr = np.array(getattr(p, name))
      flat = arr.reshape(-1)
      flat[rng.integers(flat.size)] = rng.choice(
        [-1, 0, 1, 2, 5, 50, 10**6, int(rng.integers(-99, 99))]
      )
      p = p.replace(**{name: flat.reshape(arr.shape)})
    mutated.append(p)
  host = [_host(p) for p in mutated]
  dev_code, dev_where = device_check(stack_programs(mutated))
  assert list(zip(np.asarray(dev_code).tolist(), np.asarray(dev_where).tolist())) == host
  assert sum(c != 0 for c, _ in host) > 100  # most mutations are caught


def test_wrong_shapes_are_rejected():
  p = FAMILIES["modular"].build(tokenizer("tiny"))
  with pytest.raises(ProgramError, match="reset_code has shape"):
    validate_program(p.replace(reset_code=np.zeros((3, 8), np.int32)), CFG)
