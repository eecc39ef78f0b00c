"""The checks every `EnvProgram` passes (`check_program`), written once over an array namespace
(`numpy` on the host, `jax.numpy` on device, under `jit`/`vmap`) so host and device validation
cannot disagree; `validate_program` raises `ProgramError` naming the first failing check."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from spade_jax.envs.ir.program import (
  ANSWER_INT,
  ANSWER_LIST,
  ARG_KIND,
  DST_KIND,
  MODE_IMM,
  MODE_LIST,
  MODE_REG,
  MODE_TABLE,
  N_OPS,
  OPCODE,
  REWARD_SCALE,
  SLOT_INT,
  SLOT_LIST,
  SLOT_NONE,
  TPL_CASE0,
  EnvProgram,
  ProgramConfig,
  empty_program,
)

# ----------------------------------------------------------------------------- validation
# Error codes of `check_program`, in the order they are tested; `where` is the row index.
CHECKS = (
  "ok",
  "reset instruction {where}: unknown opcode",
  "reset instruction {where}: bad destination for this opcode",
  "reset instruction {where}: operand mode does not fit this opcode",
  "reset instruction {where}: operand out of range",
  "reset instruction {where}: empty random range or choice",
  "step instruction {where}: unknown opcode",
  "step instruction {where}: bad destination for this opcode",
  "step instruction {where}: operand mode does not fit this opcode",
  "step instruction {where}: operand out of range",
  "step instruction {where}: empty random range or choice",
  "reset code: instruction {where} follows a nop (nops only pad the end)",
  "step code: instruction {where} follows a nop (nops only pad the end)",
  "table {where}: length out of range or non-zero padding",
  "max_turns must be in [1, max_turns_cap]",
  "n_cases must be in [1, config n_cases]",
  "case {where}: bad predicate/reward operand or stop flag",
  "case {where}: immediate reward outside [-1000, 1000]",
  "answer: must name a general scalar register or a general list register (answer_mode: "
  "grammar 0..5, 0 first / 1 last, grammar 0 only with 0)",
  "template {where}: token id out of range or non-zero padding",
  "template {where}: bad number slot (kind, register, position or order)",
  "template {where}: sign tail longer than tail_len or non-zero padding",
  "template {where}: belongs to an unused case but is not empty",
  "tokenizer tables: digit/separator ids out of range",
  "obs_select: must be zeros, an immediate or a scalar register",
)
# The checks that existed before `obs_select` (the tiny designer's reason codes are frozen).
N_STRAIGHT_LINE_CHECKS = 24
assert CHECKS[N_STRAIGHT_LINE_CHECKS - 1].startswith("tokenizer tables")


def check_program(program: EnvProgram, cfg: ProgramConfig, xp=jnp, vocab_size: int = 1 << 30):
  """Well-formedness, ranges and static bounds. Returns ``(code, where)`` int32 scalars:
  ``code`` indexes `CHECKS` (0 = valid), ``where`` is the offending row. ``xp`` is `numpy`
  (host) or `jax.numpy` (device; traceable, vmappable over programs)."""
  checks = []
  for code in (program.reset_code, program.step_code):
    checks += _code_checks(xp.asarray(code), xp.asarray(program.table_len), cfg, xp)
  for code in (program.reset_code, program.step_code):
    op = xp.asarray(code)[:, 0]
    after_nop = xp.cumsum((op == 0).astype(xp.int32)) - (op == 0) > 0
    checks.append((op != 0) & after_nop)
  tl = xp.asarray(program.table_len)
  col = xp.arange(cfg.list_len)
  checks.append(
    (tl < 0)
    | (tl > cfg.list_len)
    | xp.any((col[None, :] >= tl[:, None]) & (xp.asarray(program.tables) != 0), 1)
  )
  mt, nc = xp.asarray(program.max_turns), xp.asarray(program.n_cases)
  checks.append(((mt < 1) | (mt > cfg.max_turns_cap))[None])
  checks.append(((nc < 1) | (nc > cfg.n_cases))[None])
  cases = xp.asarray(program.cases)
  used = xp.arange(cfg.n_cases) < nc
  bad_case = (
    ~_scalar_operand_ok(cases[:, 0], cases[:, 1], cfg)
    | ~_scalar_operand_ok(cases[:, 2], cases[:, 3], cfg)
    | (cases[:, 4] < 0)
    | (cases[:, 4] > 2)
  )
  checks.append(xp.where(used, bad_case, xp.any(cases != 0, 1)))
  checks.append(used & (cases[:, 2] == MODE_IMM) & (xp.abs(cases[:, 3]) > REWARD_SCALE))
  ans = xp.asarray(program.answer)
  checks.append(
    (
      ~(
        ((ans[0] == ANSWER_INT) & (ans[1] >= 0) & (ans[1] < cfg.n_regs))
        | ((ans[0] == ANSWER_LIST) & (ans[1] >= 0) & (ans[1] < cfg.n_lists))
      )
      | ~_answer_mode_ok(xp.asarray(program.answer_mode))
    )[None]
  )
  checks += _template_checks(program, cfg, xp, vocab_size)
  ids = xp.concatenate([xp.asarray(program.digit_ids), xp.asarray(program.sep_ids).reshape(-1)])
  sl = xp.asarray(program.sep_len)
  checks.append(
    (xp.any((ids < 0) | (ids >= vocab_size)) | xp.any((sl < 0) | (sl > cfg.tail_len)))[None]
  )
  sel = xp.asarray(program.obs_select)
  checks.append(
    (~(((sel[0] == 0) & (sel[1] == 0)) | _scalar_operand_ok(sel[0], sel[1], cfg)))[None]
  )
  code, where = xp.int32(0), xp.int32(0)
  for i in range(len(checks) - 1, -1, -1):  # the first failing check wins
    bad = xp.asarray(checks[i])
    hit = xp.any(bad)
    code = xp.where(hit, xp.int32(i + 1), code)
    where = xp.where(hit, xp.argmax(bad).astype(xp.int32), where)
  return code, where


def _answer_mode_ok(mode):
  g, last = mode[0], mode[1]
  return (g >= 0) & (g <= 5) & ((last == 0) | ((last == 1) & (g > 0)))


def _scalar_operand_ok(mode, val, cfg):
  return (mode == MODE_IMM) | ((mode == MODE_REG) & (val >= 0) & (val < cfg.n_regfile))


def _code_checks(code, table_len, cfg: ProgramConfig, xp):
  op, dst = code[:, 0], code[:, 1]
  known = (op >= 0) & (op < N_OPS)
  opc = xp.clip(op, 0, N_OPS - 1)
  dkind, akind = xp.asarray(DST_KIND)[opc], xp.asarray(ARG_KIND)[opc]
  bad_dst = xp.where(
    dkind == 1,
    (dst < 0) | (dst >= cfg.n_regs),
    xp.where(dkind == 2, (dst < 0) | (dst >= cfg.n_lists), dst != 0),
  )
  bad_mode = xp.zeros(op.shape, bool)
  bad_range = xp.zeros(op.shape, bool)
  n_code = xp.sum(op != 0)  # a jump target is in [0, n_code]; n_code ends the call
  for j in range(3):
    mode, val, kind = code[:, 2 + 2 * j], code[:, 3 + 2 * j], akind[:, j]
    scalar_ok = (mode == MODE_IMM) | (mode == MODE_REG)
    list_ok = (mode == MODE_LIST) | (mode == MODE_TABLE)
    bad_mode |= xp.where(
      kind == 1,
      ~scalar_ok,
      xp.where(
        kind == 2, ~list_ok, xp.where(kind == 3, mode != MODE_IMM, (mode != 0) | (val != 0))
      ),
    )
    limit = xp.where(
      mode == MODE_REG, cfg.n_regfile, xp.where(mode == MODE_LIST, cfg.n_listfile, cfg.n_tables)
    )
    bad_range |= (mode >= MODE_REG) & ((val < 0) | (val >= limit))
    bad_range |= (kind == 3) & ((val < 0) | (val > n_code))
  # Statically empty random ranges: rand with immediate lo > hi; choice from an empty table.
  rand_bad = (
    (op == OPCODE["rand"])
    & (code[:, 2] == MODE_IMM)
    & (code[:, 4] == MODE_IMM)
    & (code[:, 3] > code[:, 5])
  )
  table = xp.clip(code[:, 3], 0, cfg.n_tables - 1)
  rand_bad |= (op == OPCODE["choice"]) & (code[:, 2] == MODE_TABLE) & (table_len[table] <= 0)
  return [
    ~known,
    known & bad_dst,
    known & ~bad_dst & bad_mode,
    known & ~bad_mode & bad_range,
    rand_bad,
  ]


def _template_checks(program: EnvProgram, cfg: ProgramConfig, xp, vocab_size):
  ids, n = xp.asarray(program.tpl_ids), xp.asarray(program.tpl_len)
  col = xp.arange(cfg.tpl_tokens)
  inside = col[None, :] < n[:, None]
  bad_ids = (
    (n < 0)
    | (n > cfg.tpl_tokens)
    | xp.any(xp.where(inside, (ids < 0) | (ids >= vocab_size), ids != 0), 1)
  )
  slots = xp.asarray(program.tpl_slots)
  kind, reg, pos, drop = slots[..., 0], slots[..., 1], slots[..., 2], slots[..., 3]
  edrop, eafter = slots[..., 4], slots[..., 5]
  active = kind != SLOT_NONE
  reg_ok = xp.where(
    kind == SLOT_INT, (reg >= 0) & (reg < cfg.n_regfile), (reg >= 0) & (reg < cfg.n_listfile)
  )
  prev_pos = xp.concatenate([xp.zeros_like(pos[:, :1]), pos[:, :-1]], 1)
  prev_active = xp.concatenate([xp.ones_like(active[:, :1]), active[:, :-1]], 1)
  next_pos = xp.concatenate([pos[:, 1:], xp.zeros_like(pos[:, :1])], 1)
  next_pos = xp.where(
    xp.concatenate([active[:, 1:], xp.zeros_like(active[:, :1])], 1), next_pos, n[:, None]
  )
  slot_ok = xp.where(
    active,
    (kind <= SLOT_LIST)
    & reg_ok
    & (pos >= prev_pos)
    & prev_active
    & (pos <= n[:, None])
    & (drop >= 0)
    & (drop <= pos - prev_pos)
    & (edrop >= 0)
    & (edrop <= pos - prev_pos)
    & (eafter >= 0)
    & (eafter <= next_pos - pos)
    & ((kind == SLOT_LIST) | (edrop + eafter == 0)),
    xp.all(slots == 0, -1),
  )
  tail, tl = xp.asarray(program.tpl_tail), xp.asarray(program.tpl_tail_len)
  tcol = xp.arange(cfg.tail_len)
  tin = tcol[None, None, None, :] < tl[..., None]
  bad_tail = (
    (tl < 0)
    | (tl > cfg.tail_len)
    | (~active[..., None] & (tl != 0))
    | xp.any(xp.where(tin, (tail < 0) | (tail >= vocab_size), tail != 0), -1)
  )
  t = xp.arange(cfg.n_templates)
  unused = (t >= TPL_CASE0 + xp.asarray(program.n_cases)) & (t < TPL_CASE0 + cfg.n_cases)
  return [
    bad_ids,
    xp.any(~slot_ok, 1),
    xp.any(bad_tail, (1, 2)),
    unused & ((n != 0) | xp.any(active, 1)),
  ]


class ProgramError(ValueError):
  """A malformed program, with a human-readable reason."""


def validate_program(program: EnvProgram, cfg: ProgramConfig, vocab_size: int = 1 << 30):
  """Host check: raises `ProgramError` naming the first problem; returns the program."""
  host = EnvProgram(
    **{f.name: np.asarray(getattr(program, f.name)) for f in dataclasses.fields(EnvProgram)}
  )
  shapes = {k: v.shape for k, v in empty_program(cfg).items()}
  for name, shape in shapes.items():
    if getattr(host, name).shape != shape:
      raise ProgramError(f"field {name} has shape {getattr(host, name).shape}, expected {shape}")
  code, where = check_program(host, cfg, np, vocab_size)
  if int(code):
    raise ProgramError(CHECKS[int(code)].format(where=int(where)))
  return program
