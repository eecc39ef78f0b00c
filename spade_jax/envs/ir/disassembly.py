"""`disassemble`: an `EnvProgram` back to the assembly language (`assembly.py`) in canonical
form, which assembles back to the identical program."""

from __future__ import annotations

import json

import numpy as np

from spade_jax.envs.ir.assembly import ANSWER_ORDER, OUTCOMES
from spade_jax.envs.ir.parse import GRAMMAR_NAMES
from spade_jax.envs.ir.program import (
  ANSWER_INT,
  DEFAULT_CONFIG,
  MODE_IMM,
  MODE_LIST,
  MODE_NONE,
  MODE_REG,
  OPS,
  SPECIALS,
  TPL_CASE0,
  TPL_HINT,
  EnvProgram,
  ProgramConfig,
)
from spade_jax.envs.ir.text import template_items


def operand_text(mode: int, val: int, cfg: ProgramConfig) -> str:
  if mode == MODE_IMM:
    return str(val)
  if mode == MODE_REG:
    return f"r{val}" if val < cfg.n_regs else SPECIALS[val - cfg.n_regs]
  if mode == MODE_LIST:
    return f"l{val}" if val < cfg.n_lists else "lguess"
  return f"t{val}"


def items_text(items, cfg) -> str:
  words = []
  for kind, val in items:
    if kind == "text":
      words.append(json.dumps(val, ensure_ascii=False))
    else:
      words.append(operand_text(MODE_REG if kind == "reg" else MODE_LIST, val, cfg))
  return " ".join(words)


def disassemble(program: EnvProgram, tokenizer, cfg: ProgramConfig = DEFAULT_CONFIG) -> str:
  """`EnvProgram` -> canonical assembly text (``assemble`` of it gives the same arrays)."""
  p = EnvProgram(**{k: np.asarray(v) for k, v in vars(program).items()})
  out = [f"turns {int(p.max_turns)}"]
  for i in range(cfg.n_tables):
    n = int(p.table_len[i])
    if n:
      out.append(f"table t{i} " + " ".join(str(int(v)) for v in p.tables[i, :n]))
  names = list(OPS)
  for section, code in (("reset", p.reset_code), ("step", p.step_code)):
    out.append(section)
    for row in code:
      if row[0] == 0:
        break
      name = names[int(row[0])]
      dst_kind, arg_kinds = OPS[name]
      words = [name]
      if dst_kind != "-":
        words.append(operand_text(MODE_REG if dst_kind == "r" else MODE_LIST, int(row[1]), cfg))
      words += [
        operand_text(int(row[2 + 2 * j]), int(row[3 + 2 * j]), cfg) for j in range(len(arg_kinds))
      ]
      out.append(" ".join(words))
  kind, idx = int(p.answer[0]), int(p.answer[1])
  out.append("answer " + (f"r{idx}" if kind == ANSWER_INT else f"l{idx}"))
  grammar, last = (int(x) for x in p.answer_mode)
  if grammar:
    out.append(f"parse {GRAMMAR_NAMES[grammar]} {ANSWER_ORDER[last]}")
  if int(p.obs_select[0]) != MODE_NONE:
    out.append("obssel " + operand_text(int(p.obs_select[0]), int(p.obs_select[1]), cfg))
  alts = [template_items(p, cfg.obs_template(j), tokenizer) for j in range(cfg.n_obs)]
  while len(alts) > 1 and not alts[-1]:
    alts.pop()
  out += ["obs " + items_text(items, cfg) for items in alts]
  hint = template_items(p, TPL_HINT, tokenizer)
  if hint:
    out.append("hint " + items_text(hint, cfg))
  for i in range(int(p.n_cases)):
    pm, pv, rm, rv, stop = (int(x) for x in p.cases[i])
    out.append(
      f"case {operand_text(pm, pv, cfg)} {operand_text(rm, rv, cfg)} "
      f"{OUTCOMES[stop]} " + items_text(template_items(p, TPL_CASE0 + i, tokenizer), cfg)
    )
  return "\n".join(out) + "\n"
