"""On-device assembly of designer-language tokens into `EnvProgram` arrays (pure jnp, jittable,
vmappable), and the first-message templates built from a program's own arrays.

`assemble_tokens` runs the grammar automaton (`grammar.transition`) over each token stream in a
``lax.scan`` whose carry is only the automaton state and an open immediate. Per token it emits
at most four ``(offset, value)`` writes into one flat buffer of the program's token-written
fields (an immediate's value is written when the token after its last digit arrives; every
cell is written once), plus which template / table the token extends; one scatter and a few
segment counts after the scan give the arrays. What a tokenizer would compute on the host is
constant for the tiny tokenizer (`tokenizer.py`: the phrase table is prefix-free): literal ids
are the designer's tokens, a slot's position is the number of literal tokens before it, a
negative value's tail is ``-`` and an empty list replaces nothing; the solution template is
``\\boxed{`` slot ``}``. Then `checks.check_program` runs with ``xp=jnp``. A program with a
parse error or a failed check is replaced by the dummy (`language.DUMMY_PROGRAM`), so the
interpreter runs every row without faults; ``ok_B`` says which rows are real.
`assemble_and_validate` adds the validator's feasibility check (`feasible`: the program's own
answer must win), as the Python path requires of designer code.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from spade_jax.envs.ir.checks import CHECKS, N_STRAIGHT_LINE_CHECKS, check_program
from spade_jax.envs.ir.interpreter import ProgramEnv
from spade_jax.envs.ir.program import (
  ANSWER_INT,
  ANSWER_LIST,
  MODE_IMM,
  MODE_LIST,
  MODE_REG,
  MODE_TABLE,
  SLOT_INT,
  SLOT_LIST,
  TPL_CASE0,
  TPL_HINT,
  TPL_OBS,
  TPL_SOLUTION,
  EnvProgram,
)
from spade_jax.rollout.types import FirstTemplates
from spade_jax.tiny import grammar as g

# Reason codes of `assemble_tokens`: parse errors, then ``check_program`` failures.
REASONS = (
  g.PARSE_REASONS
  + tuple(f"check: {c}" for c in CHECKS[1:N_STRAIGHT_LINE_CHECKS])  # frozen (no obs_select)
  + ("feasibility: the program's own answer is not rewarded 1.0 with termination",)
)
INFEASIBLE = len(REASONS) - 1
N_PARSE = len(g.PARSE_REASONS)
PAD_ID = 0  # the tiny tokenizer's <|endoftext|>: never part of a program, pads token rows
_FIELDS = (
  "reset_code",
  "step_code",
  "tables",
  "max_turns",
  "answer",
  "cases",
  "tpl_ids",
  "tpl_slots",
)


def _layout(cfg):
  """Offsets of the token-written fields in the flat buffer, and its size."""
  sizes = dict(
    reset_code=cfg.n_reset * 8,
    step_code=cfg.n_step * 8,
    tables=cfg.n_tables * cfg.list_len,
    max_turns=1,
    answer=2,
    cases=cfg.n_cases * 5,
    tpl_ids=cfg.n_templates * cfg.tpl_tokens,
    tpl_slots=cfg.n_templates * cfg.tpl_slots * 6,
  )
  off, pos = {}, 0
  for name in _FIELDS:
    off[name], pos = pos, pos + sizes[name]
  return off, pos


def _parse(lang, tokens_T):
  """One token stream -> (EnvProgram arrays, parse error code)."""
  cfg, tb = lang.cfg, g.tables(lang)
  off, N = _layout(cfg)
  w = jnp.where

  def body(carry, tok_in):
    st, done, err, pend_off, pend_val, pend_neg = carry
    tok, pad, outside = tok_in
    e, new, (c, ix, act, arg) = g.transition(tb, st, tok, jnp)
    e = w(outside, g.E_SYNTAX, e)  # an id beyond the tokenizer (a padded model vocabulary)
    live = ~done & (err == 0) & ~pad
    ok = live & (e == 0)
    sign = (c == g.C_PLUS) | (c == g.C_MINUS)
    k, tk, sl, tab = new["item"] - 1, new["tok"] - 1, new["slot"] - 1, new["nt"] - 1
    mode = w(
      c == g.C_TABLE, MODE_TABLE, w((c == g.C_LREG) | (c == g.C_LGUESS), MODE_LIST, MODE_REG)
    )
    mode = w(sign, MODE_IMM, mode)
    val = w(c == g.C_SPECIAL, cfg.n_regs + ix, w(c == g.C_LGUESS, cfg.n_lists, ix))
    sec = w(act == g.ACT_OPND, arg // 4, arg)
    j = arg % 4
    base = w(sec == 0, off["reset_code"], off["step_code"]) + k * 8
    cbase = off["cases"] + k * 5
    t = w(arg == g.TPL_OBS_KIND, TPL_OBS, w(arg == g.TPL_HINT_KIND, TPL_HINT, TPL_CASE0 + k))
    lit_off = off["tpl_ids"] + t * cfg.tpl_tokens + tk
    sbase = off["tpl_slots"] + (t * cfg.tpl_slots + sl) * 6
    is_int = (c == g.C_REG) | (c == g.C_SPECIAL)
    A = lambda a: act == a
    pick = lambda pairs, default: jnp.select([a for a, _ in pairs], [v for _, v in pairs], default)
    # The token's own writes: (offset, value) on three channels; N = no write.
    o1 = pick(
      [
        (A(g.ACT_OPCODE), base),
        (A(g.ACT_DST), base + 1),
        (A(g.ACT_OPND), base + 2 + 2 * j),  # operand mode
        (A(g.ACT_ANSWER), off["answer"]),
        (A(g.ACT_PRED), cbase),
        (A(g.ACT_REWARD), cbase + 2),
        (A(g.ACT_FLAG), cbase + 4),
        (A(g.ACT_LIT), lit_off),
        (A(g.ACT_SLOT), sbase),
      ],
      N,
    )
    v1 = pick(
      [
        (A(g.ACT_OPCODE) | A(g.ACT_DST), ix),
        (A(g.ACT_ANSWER), w(c == g.C_REG, ANSWER_INT, ANSWER_LIST)),
        (A(g.ACT_FLAG), (c == g.C_KW["stop"]).astype(jnp.int32)),
        (A(g.ACT_LIT), tok),
        (A(g.ACT_SLOT), w(is_int, SLOT_INT, SLOT_LIST)),
      ],
      mode,
    )
    value_off = pick(  # where a register operand's value (or an immediate) goes
      [
        (A(g.ACT_OPND), base + 3 + 2 * j),
        (A(g.ACT_ANSWER), off["answer"] + 1),
        (A(g.ACT_PRED), cbase + 1),
        (A(g.ACT_REWARD), cbase + 3),
        (A(g.ACT_SLOT), sbase + 1),
        (A(g.ACT_TURNS), off["max_turns"]),
        (A(g.ACT_TABLE_VAL), off["tables"] + tab * cfg.list_len + tk),
      ],
      N,
    )
    o2 = w(sign, N, value_off)
    o3 = w(A(g.ACT_SLOT), sbase + 2, N)  # the slot's position: literal tokens before it
    # Immediates: opened at the sign, digits accumulate, written when the next token arrives.
    opens = ok & sign & jnp.isin(act, jnp.asarray(g.NUMBER_ACTS))
    closing = live & (act != g.ACT_DIGIT) & (pend_off < N)
    writes_off = jnp.stack([w(closing, pend_off, N), w(ok, o1, N), w(ok, o2, N), w(ok, o3, N)])
    writes_val = jnp.stack([w(pend_neg, -pend_val, pend_val), v1, val, new["tok"]])
    digit = ok & A(g.ACT_DIGIT)
    pend_val = w(opens, 0, w(digit, pend_val * 10 + ix, pend_val))
    pend_neg = w(opens, c == g.C_MINUS, pend_neg)
    pend_off = w(opens, value_off, w(closing, N, pend_off))
    lit_t = w(ok & A(g.ACT_LIT), t, cfg.n_templates)  # which template / table grows
    counts = jnp.stack([lit_t, w(ok & A(g.ACT_TABLE_VAL) & sign, tab, cfg.n_tables)])
    st = {key: w(ok, new[key], st[key]) for key in st}
    done = done | (ok & (new["q"] == tb.done))
    err = w(live & (e != 0), e, err)
    return (st, done, err, pend_off, pend_val, pend_neg), (writes_off, writes_val, counts)

  st0 = g.initial_state(tb, (), jnp)
  carry0 = (st0, jnp.bool_(False), jnp.int32(0), jnp.int32(N), jnp.int32(0), jnp.bool_(False))
  tokens_T = jnp.asarray(tokens_T, jnp.int32)
  pad_T = jnp.cumsum(tokens_T == PAD_ID) > 0  # the stream ends at its first padding token
  outside_T = (tokens_T < 0) | (tokens_T >= lang.vocab_size)
  xs = (jnp.clip(tokens_T, 0, lang.vocab_size - 1), pad_T, outside_T)
  (st, done, err, *_), (offs, vals, counts) = jax.lax.scan(body, carry0, xs)
  buf = jnp.zeros(N, jnp.int32).at[offs.reshape(-1)].set(vals.reshape(-1), mode="drop")
  tpl_len = jnp.zeros(cfg.n_templates, jnp.int32).at[counts[:, 0]].add(1, mode="drop")
  table_len = jnp.zeros(cfg.n_tables, jnp.int32).at[counts[:, 1]].add(1, mode="drop")
  err = w(err != 0, err, w(done, 0, g.E_NO_END))
  return _finish(lang, buf, off, tpl_len, table_len, st["item"]), err


def _finish(lang, buf, off, tpl_len, table_len, n_cases) -> EnvProgram:
  cfg = lang.cfg
  field = lambda name, shape: buf[off[name] : off[name] + math.prod(shape)].reshape(shape)
  nt, ts = cfg.n_templates, cfg.tpl_slots
  answer = field("answer", (2,))
  tpl_ids = field("tpl_ids", (nt, cfg.tpl_tokens))
  tpl_ids = tpl_ids.at[TPL_SOLUTION, :2].set(jnp.array([lang.boxed_id, lang.close_id]))
  slots = field("tpl_slots", (nt, ts, 6))
  sol_kind = jnp.where(answer[0] == ANSWER_LIST, SLOT_LIST, SLOT_INT)
  slots = slots.at[TPL_SOLUTION, 0, :3].set(jnp.stack([sol_kind, answer[1], jnp.int32(1)]))
  active = slots[..., 0] != 0
  tail = jnp.zeros((nt, ts, 2, cfg.tail_len), jnp.int32)
  tail = tail.at[:, :, 0, 0].set(jnp.where(active, lang.minus_id, 0))
  tail_len = jnp.zeros((nt, ts, 2), jnp.int32).at[:, :, 0].set(active.astype(jnp.int32))
  return EnvProgram(
    reset_code=field("reset_code", (cfg.n_reset, 8)),
    step_code=field("step_code", (cfg.n_step, 8)),
    tables=field("tables", (cfg.n_tables, cfg.list_len)),
    table_len=table_len,
    cases=field("cases", (cfg.n_cases, 5)),
    n_cases=jnp.asarray(n_cases, jnp.int32),
    max_turns=field("max_turns", (1,))[0],
    answer=answer,
    answer_mode=jnp.zeros(2, jnp.int32),  # the tiny language has no `parse` line
    tpl_ids=tpl_ids,
    tpl_len=tpl_len.at[TPL_SOLUTION].set(2),
    tpl_slots=slots,
    tpl_tail=tail,
    tpl_tail_len=tail_len,
    digit_ids=jnp.asarray(lang.digit_ids, jnp.int32),
    sep_ids=jnp.asarray(lang.sep_ids, jnp.int32),
    sep_len=jnp.asarray(lang.sep_len, jnp.int32),
    obs_select=jnp.zeros(2, jnp.int32),  # the tiny language has one observation template
  )


@functools.partial(jax.jit, static_argnums=0)
def dummy_program(lang) -> EnvProgram:
  """The fixed valid program that replaces rejected samples (`language.DUMMY_PROGRAM`)."""
  return _parse(lang, jnp.asarray(lang.dummy_tokens, jnp.int32))[0]


@functools.partial(jax.jit, static_argnums=0)
def assemble_tokens(lang, tokens_BT):
  """Designer tokens ``[B, T]`` (a program each, ending with the end token; anything after it,
  or from the first padding token ``PAD_ID`` on, is ignored) -> ``(programs [B], ok_B, reason_B)``: ``reason_B`` indexes `REASONS` (0 ok,
  then parse errors, then ``"check: ..."`` failures of `check_program`). Rows that are not ok
  hold `dummy_program`."""
  programs, err_B = jax.vmap(lambda t: _parse(lang, t))(jnp.asarray(tokens_BT, jnp.int32))
  code_B, _ = jax.vmap(lambda p: check_program(p, lang.cfg, jnp, lang.vocab_size))(programs)
  ok_B = (err_B == 0) & (code_B == 0)
  reason_B = jnp.where(err_B != 0, err_B, jnp.where(code_B != 0, N_PARSE - 1 + code_B, 0))
  dummy = dummy_program(lang)
  keep = lambda p, d: jnp.where(ok_B.reshape((-1,) + (1,) * d.ndim), p, d[None])
  return jax.tree.map(keep, programs, dummy), ok_B, reason_B.astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(0, 3))
def feasible(lang, programs: EnvProgram, key, n_seeds: int = 4):
  """``[B]`` bool: on each of ``n_seeds`` resets (keys from ``key``) the program's own answer
  (`ProgramEnv.solution_action`) at the first turn earns reward 1.0 and terminates, without a
  fault at reset or step: the feasibility check of the Python validator (`envs.sandbox.validate`),
  on device. ``programs`` has a leading batch axis."""
  env = ProgramEnv(lang.cfg)

  def one(program, k):
    k_reset, k_step = jax.random.split(k)
    _, state = env.reset_env(k_reset, program)
    action = env.solution_action(state, program)
    _, new, reward, terminated, _, info = env.transition(k_step, state, action, program)
    return (state.fault == 0) & (info["fault"] == 0) & terminated & (reward == 1.0)

  B = jax.tree.leaves(programs)[0].shape[0]
  keys = jax.random.split(key, (B, n_seeds))
  ok_BK = jax.vmap(lambda p, ks: jax.vmap(lambda k: one(p, k))(ks))(programs, keys)
  return jnp.all(ok_BK, axis=1)


def assemble_and_validate(lang, tokens_BT, key, n_seeds: int = 4):
  """`assemble_tokens`, then `feasible` on the rows that assembled and passed the checks:
  infeasible rows also become `dummy_program` with reason `INFEASIBLE`. Returns
  ``(programs [B], ok_B, reason_B)``."""
  programs, ok_B, reason_B = assemble_tokens(lang, tokens_BT)
  feas_B = feasible(lang, programs, key, n_seeds)
  bad_B = ok_B & ~feas_B
  dummy = dummy_program(lang)
  keep = lambda p, d: jnp.where(bad_B.reshape((-1,) + (1,) * d.ndim), d[None], p)
  reason_B = jnp.where(bad_B, INFEASIBLE, reason_B).astype(jnp.int32)
  return jax.tree.map(keep, programs, dummy), ok_B & feas_B, reason_B


# ------------------------------------------------------------------------ first messages
def first_templates_device(
  lang, programs: EnvProgram, spec=None, *, preamble_ids=(), hint_separator=None
) -> FirstTemplates:
  """`rollout.types.first_templates` from the programs' own arrays (jittable; ``programs``
  with a leading batch axis, or one program): ``preamble + obs`` and ``preamble + obs +
  hint_separator + hint`` (just ``preamble + obs`` when the hint is empty).

  ``spec`` (a `RolloutSpec`) fixes the output sizes to ``spec.first_cfg``; without it they are
  what `RolloutSpec.make` computes for this preamble. ``preamble_ids`` must be
  ``tok.encode(spec.preamble)``; ``hint_separator`` defaults to the ``"\\n\\nHINT: "`` phrase
  token. Exact (equal to the host compilation) because the tiny tokenizer's phrase table is
  prefix-free and observations start with a phrase."""
  cfg = lang.cfg
  if isinstance(spec, (tuple, list)):  # first_templates_device(lang, programs, preamble_ids)
    spec, preamble_ids = None, spec
  pre = tuple(int(t) for t in preamble_ids)
  sep = (lang.hint_sep_id,) if hint_separator is None else tuple(int(t) for t in hint_separator)
  if spec is not None:
    if spec.program_cfg != cfg:
      raise ValueError("spec.program_cfg differs from the language's config")
    if spec.preamble and not pre:
      raise ValueError("spec has a preamble: pass preamble_ids=tok.encode(spec.preamble)")
    width, n_slots = spec.first_cfg.tpl_tokens, spec.first_cfg.tpl_slots
  else:
    width, n_slots = 2 * cfg.tpl_tokens + len(pre) + len(sep) + 8, 2 * cfg.tpl_slots
  if programs.tpl_ids.ndim == 3:
    return jax.vmap(lambda p: _first_one(lang, p, pre, sep, width, n_slots))(programs)
  return _first_one(lang, programs, pre, sep, width, n_slots)


def _first_one(lang, p: EnvProgram, pre, sep, width, n_slots) -> FirstTemplates:
  cfg = lang.cfg
  P, S, TS = len(pre), len(sep), cfg.tpl_slots
  n_o, n_h = p.tpl_len[TPL_OBS], p.tpl_len[TPL_HINT]
  has_hint = n_h > 0
  i = jnp.arange(width)
  head = jnp.asarray(pre + sep + (0,), jnp.int32)  # preamble, separator, then a 0 pad
  lit = lambda t, at: p.tpl_ids[t, jnp.clip(i - at, 0, cfg.tpl_tokens - 1)]
  plain = jnp.where(i < P, head[jnp.clip(i, 0, P + S)], jnp.where(i < P + n_o, lit(TPL_OBS, P), 0))
  in_sep = (i >= P + n_o) & (i < P + n_o + S)
  hinted = jnp.where(in_sep, head[jnp.clip(P + i - (P + n_o), 0, P + S)], plain)
  hinted = jnp.where(
    (i >= P + n_o + S) & (i < P + n_o + S + n_h), lit(TPL_HINT, P + n_o + S), hinted
  )
  hinted = jnp.where(has_hint, hinted, plain)
  # slots: the observation's (positions shifted by the preamble), then the hint's
  k_o = jnp.sum(p.tpl_slots[TPL_OBS, :, 0] != 0)
  k_h = jnp.sum(p.tpl_slots[TPL_HINT, :, 0] != 0)
  r = jnp.arange(n_slots)
  shift = lambda rows, by: rows.at[:, 2].add(jnp.where(rows[:, 0] != 0, by, 0))
  pad = lambda x: jnp.concatenate([x, jnp.zeros((n_slots,) + x.shape[1:], x.dtype)])
  obs_s, hint_s = (
    pad(shift(p.tpl_slots[TPL_OBS], P)),
    pad(shift(p.tpl_slots[TPL_HINT], P + n_o + S)),
  )
  obs_t, hint_t = pad(p.tpl_tail[TPL_OBS]), pad(p.tpl_tail[TPL_HINT])
  obs_tl, hint_tl = pad(p.tpl_tail_len[TPL_OBS]), pad(p.tpl_tail_len[TPL_HINT])
  take_h = jnp.clip(r - k_o, 0, TS)
  from_obs, from_hint = r < k_o, (r >= k_o) & (r - k_o < k_h) & has_hint

  def mix(o, h):
    shape = (-1,) + (1,) * (o.ndim - 1)
    return jnp.where(
      from_obs.reshape(shape), o[r], jnp.where(from_hint.reshape(shape), h[take_h], 0)
    )

  stack = lambda a, b: jnp.stack([a, b]).astype(jnp.int32)
  plain_len, hinted_len = P + n_o, jnp.where(has_hint, P + n_o + S + n_h, P + n_o)
  return FirstTemplates(
    tpl_ids=stack(plain, hinted),
    tpl_len=stack(plain_len, hinted_len),
    tpl_slots=stack(obs_s[:n_slots], mix(obs_s, hint_s)),
    tpl_tail=stack(obs_t[:n_slots], mix(obs_t, hint_t)),
    tpl_tail_len=stack(obs_tl[:n_slots], mix(obs_tl, hint_tl)),
    digit_ids=p.digit_ids,
    sep_ids=p.sep_ids,
    sep_len=p.sep_len,
  )
