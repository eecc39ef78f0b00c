"""Semantics of one `EnvProgram` instruction (Python int semantics, checked int32).

`execute` computes every opcode's result for the current operands and selects the one named
by the opcode: under `vmap` each lane may run a different program, so data-dependent control
flow would become a select anyway. The iterative ops (``gcd``, ``rsample``'s own draws) run
in `while_loop`s whose trip counts are zero unless the opcode is theirs, so they cost nothing
when no lane needs them. Jumps write nothing here; `next_pc` gives the instruction to run next
(the interpreter's program counter).

Randomness: each interpreter call draws one block of random bits up front; a drawing op
consumes ``k`` values (``rand``: the value, ``choice``: the index, ``shuffle``: the
permutation ``new[i] = old[perm[i]]``, ``sample``: the chosen indices in order, ``rsample l a b k`` = ``random.sample(range(a, b),
k)``: the chosen indices ``value - a`` in order). Every drawn
value is appended to the episode's draw log, and a *tape* of values may override them
(replaying draws recorded from a Python environment); replayed values are range-checked
(and indices checked distinct: a bit set for list populations, pairwise for ``rsample``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from spade_jax.envs.ir.program import (
  FAULT_CAPACITY,
  FAULT_INDEX,
  FAULT_OVERFLOW,
  FAULT_RANDOM,
  FAULT_ZERO_DIV,
  INT32_MAX,
  INT32_MIN,
  MODE_IMM,
  MODE_TABLE,
  OP_NAMES,
  OPCODE,
  OPS,
  ProgramConfig,
)
from spade_jax.envs.ir.text import decimal_digits

_U31 = jnp.uint32(2**31)
_SCALAR_OPS = tuple(n for n in OP_NAMES if OPS[n][0] == "r")
_LIST_OPS = tuple(n for n in OP_NAMES if OPS[n][0] == "l")
# `execute` selects results by opcode offset and tests "writes a scalar/list" by range: each
# kind must occupy consecutive opcode numbers.
for _group in (_SCALAR_OPS, _LIST_OPS):
  assert [OPCODE[n] for n in _group] == list(range(OPCODE[_group[0]], OPCODE[_group[-1]] + 1))


class Machine(NamedTuple):
  """Mutable interpreter state threaded through the instructions."""

  regs: jnp.ndarray  # [n_regfile]
  lists: jnp.ndarray  # [n_listfile, list_len]
  list_len: jnp.ndarray  # [n_listfile]
  fault: jnp.ndarray  # []
  draws: jnp.ndarray  # [n_draws + list_len] draw log
  n_draws: jnp.ndarray  # [] values logged this episode
  local: jnp.ndarray  # [] random values used in this call


class Context(NamedTuple):
  """Read-only inputs of one call."""

  tables: jnp.ndarray  # [n_tables, list_len]
  table_len: jnp.ndarray  # [n_tables]
  bits: jnp.ndarray  # [n_draws + list_len] uint32 random bits for this call
  tape: jnp.ndarray  # [n_draws + list_len] replayed draws
  tape_len: jnp.ndarray  # []


# ---------------------------------------------------------------------- checked arithmetic
def _mag(x):
  return jnp.abs(x).astype(jnp.uint32)  # abs(INT_MIN) wraps to 2**31 as uint32


def _add(a, b):
  r = a + b
  return r, ((a ^ r) & (b ^ r)) < 0


def _sub(a, b):
  r = a - b
  return r, ((a ^ b) & (a ^ r)) < 0


def _mul(a, b):
  ua, ub = _mag(a), _mag(b)
  limit = jnp.where((a < 0) != (b < 0), _U31, _U31 - 1)
  return a * b, (ua != 0) & (ub > limit // jnp.maximum(ua, 1))


def _exact_sum(x, valid):
  """Sum of int32 values without intermediate overflow -> (sum, overflowed)."""
  x = jnp.where(valid, x, 0)
  hi = jnp.sum(x >> 16)
  lo = jnp.sum(x & 0xFFFF)
  hi = hi + (lo >> 16)
  return (hi << 16) | (lo & 0xFFFF), (hi < -32768) | (hi > 32767)


def _gcd(a, b):
  """math.gcd on uint32 magnitudes (loop runs only while some lane has b != 0)."""
  x, y = jax.lax.while_loop(lambda c: c[1] != 0, lambda c: (c[1], c[0] % c[1]), (_mag(a), _mag(b)))
  return jax.lax.bitcast_convert_type(x, jnp.int32), x > _U31 - 1


def _rsample_own(bits, n, k):
  """Own draws of ``rsample``: ``k`` distinct indices of ``range(n)`` in draw order, uniform
  without replacement (the j-th pick is uniform over the ``n - j`` remaining, mapped past the
  earlier picks). ``n`` uint32; the loops run only while some lane has ``k > 0``."""
  lw = bits.shape[0]
  none = jnp.uint32(0xFFFFFFFF)

  def pick(c):
    j, picks = c
    r = bits[j] % jnp.maximum(n - j.astype(jnp.uint32), 1)
    # The r-th value not yet picked: least fixed point of v = r + #{picks <= v}.
    step = lambda v: r + jnp.sum(picks <= v).astype(jnp.uint32)
    v, _ = jax.lax.while_loop(lambda d: d[0] != d[1], lambda d: (step(d[0]), d[0]), (step(r), r))
    return j + 1, picks.at[j].set(v)

  _, picks = jax.lax.while_loop(lambda c: c[0] < k, pick, (jnp.int32(0), jnp.full(lw, none)))
  return jnp.where(picks == none, 0, picks).astype(jnp.int32)


def _rank_sort(keys):
  """Stable ascending sort of a short vector by ranks (vectorises better than `sort` under
  `vmap` on CPU) -> (sorted keys, permutation with ``sorted = keys[perm]``)."""
  col = jnp.arange(keys.shape[0])
  before = (keys[None, :] < keys[:, None]) | (
    (keys[None, :] == keys[:, None]) & (col[None, :] < col[:, None])
  )
  rank = jnp.sum(before, 1)
  onehot = rank[None, :] == col[:, None]  # [sorted position, source]
  return (
    jnp.sum(jnp.where(onehot, keys[None, :], 0), 1).astype(keys.dtype),
    jnp.sum(jnp.where(onehot, col[None, :], 0), 1).astype(jnp.int32),
  )


def _py_index(i, n):
  j = jnp.where(i < 0, i + n, i)
  return j, (j >= 0) & (j < n)


# ------------------------------------------------------------------------------- execute
def execute(ins, m: Machine, ctx: Context, cfg: ProgramConfig) -> Machine:
  """Runs one instruction ``ins`` = (op, dst, amode, a, bmode, b, cmode, c)."""
  lw = cfg.list_len
  op, dst = ins[0], ins[1]
  modes, vals = ins[2::2], ins[3::2]
  regs = m.regs
  sa, sb, sc = (
    jnp.where(modes[j] == MODE_IMM, vals[j], regs[jnp.clip(vals[j], 0, cfg.n_regfile - 1)])
    for j in range(3)
  )
  listfile = jnp.concatenate([m.lists, ctx.tables])
  lenfile = jnp.concatenate([m.list_len, ctx.table_len])

  def list_operand(j):
    idx = jnp.where(modes[j] == MODE_TABLE, cfg.n_listfile + vals[j], vals[j])
    idx = jnp.clip(idx, 0, listfile.shape[0] - 1)
    return listfile[idx], lenfile[idx]

  la, na = list_operand(0)
  lb, nb = list_operand(1)
  dsafe = jnp.clip(dst, 0, cfg.n_lists - 1)
  ld, nd = m.lists[dsafe], m.list_len[dsafe]
  col = jnp.arange(lw)
  va = col < na
  is_op = lambda name: op == OPCODE[name]

  # Draws: own values from this call's bits, overridden by the tape where it has entries.
  rs = is_op("rsample")
  rs_n, rs_n_o = _sub(sb, sa)  # population size of range(a, b)
  rs_n = jnp.where(sb > sa, rs_n, 0)
  rs_n_o = rs_n_o & (sb > sa)
  rs_bad_k = (sc < 0) | (sc > rs_n) | rs_n_o
  draw_n = jnp.select(
    [is_op("rand") | is_op("choice"), is_op("shuffle"), is_op("sample"), rs],
    [1, na, sb, jnp.where(rs_bad_k, 0, sc)],
    0,
  )
  draw_n = jnp.clip(draw_n, 0, lw)
  bits = jax.lax.dynamic_slice(ctx.bits, (m.local,), (lw,))
  span = (sb - sa + 1).astype(jnp.uint32)
  # One rank sort serves both `sort` (by value) and the draw permutation (by random key);
  # invalid slots sort last (stable), so the first `na` entries are the sorted valid ones.
  sort_keys = jnp.where(is_op("sort"), la, (bits >> 1).astype(jnp.int32))
  sorted_vals, perm = _rank_sort(jnp.where(va, sort_keys, INT32_MAX))
  rs_own = _rsample_own(bits, rs_n.astype(jnp.uint32), jnp.where(rs, draw_n, 0))
  own = jnp.where(
    rs,
    rs_own,
    jnp.where(
      is_op("rand"),
      sa + (bits[0] % jnp.maximum(span, 1)).astype(jnp.int32),
      jnp.where(
        is_op("choice"), (bits[0] % jnp.maximum(na, 1).astype(jnp.uint32)).astype(jnp.int32), perm
      ),
    ),
  )
  taped = m.n_draws + col < ctx.tape_len
  drawn = jnp.where(taped, jax.lax.dynamic_slice(ctx.tape, (m.n_draws,), (lw,)), own)
  first = drawn[0]
  in_pop = (drawn >= 0) & (drawn < na)
  # Replayed indices must be distinct and in range: a bit set with one bit per index.
  live = col < draw_n
  bitset = jnp.where(live & in_pop, jnp.left_shift(jnp.uint32(1), jnp.clip(drawn, 0, 31)), 0)
  seen = jax.lax.reduce(bitset.astype(jnp.uint32), jnp.uint32(0), jax.lax.bitwise_or, (0,))
  idx_ok = jnp.all(~live | in_pop) & (jax.lax.population_count(seen) == draw_n)
  # rsample's population may be large: pairwise distinctness over the k <= list_len indices.
  rs_live = live & rs
  rs_dup = rs_live[:, None] & rs_live[None, :] & (col[:, None] < col[None, :])
  rs_ok = jnp.all(~rs_live | ((drawn >= 0) & (drawn < rs_n))) & ~jnp.any(
    rs_dup & (drawn[:, None] == drawn[None, :])
  )
  diff, diff_o = _sub(sb, sa)
  rand_bad = (sa > sb) | diff_o | (diff >= INT32_MAX) | (taped[0] & ((first < sa) | (first > sb)))
  draw_fault = jnp.select(
    [is_op("rand"), is_op("choice"), is_op("shuffle"), is_op("sample"), rs],
    [
      jnp.where(rand_bad, FAULT_RANDOM, 0),
      jnp.where((na == 0) | ~idx_ok, FAULT_RANDOM, 0),
      jnp.where(idx_ok, 0, FAULT_RANDOM),
      jnp.where((sb < 0) | (sb > na), FAULT_INDEX, jnp.where(idx_ok, 0, FAULT_RANDOM)),
      jnp.where(
        rs_n_o,
        FAULT_OVERFLOW,
        jnp.where(
          rs_bad_k,
          FAULT_INDEX,
          jnp.where(sc > lw, FAULT_CAPACITY, jnp.where(rs_ok, 0, FAULT_RANDOM)),
        ),
      ),
    ],
    0,
  )
  picked = la[jnp.clip(drawn, 0, lw - 1)]

  # Scalar results.
  zero_div = sb == 0
  div_ovf = (sa == INT32_MIN) & (sb == -1)
  bsafe = jnp.where(zero_div | div_ovf, 1, sb)
  add, add_o = _add(sa, sb)
  sub, sub_o = _sub(sa, sb)
  mul, mul_o = _mul(sa, sb)
  gcd_in = is_op("gcd")
  gcd, gcd_o = _gcd(jnp.where(gcd_in, sa, 0), jnp.where(gcd_in, sb, 0))
  lsum, lsum_o = _exact_sum(la, va)
  short = col < jnp.minimum(na, nb)
  prods, prods_o = _mul(la, lb)
  dot, dot_o = _exact_sum(prods, short)
  lmin = jnp.min(jnp.where(va, la, INT32_MAX))
  lmax = jnp.max(jnp.where(va, la, INT32_MIN))
  hit = va & (la == sb)
  gi, g_ok = _py_index(sb, na)
  none = jnp.int32(0)
  scalar = {  # name -> (value, fault bits)
    "set": (sa, none),
    "add": (add, add_o * FAULT_OVERFLOW),
    "sub": (sub, sub_o * FAULT_OVERFLOW),
    "mul": (mul, mul_o * FAULT_OVERFLOW),
    "div": (
      jnp.where(div_ovf, INT32_MIN, jnp.floor_divide(sa, bsafe)),
      zero_div * FAULT_ZERO_DIV | div_ovf * FAULT_OVERFLOW,
    ),
    "mod": (jnp.where(div_ovf, 0, jnp.remainder(sa, bsafe)), zero_div * FAULT_ZERO_DIV),
    "neg": (-sa, (sa == INT32_MIN) * FAULT_OVERFLOW),
    "abs": (jnp.abs(sa), (sa == INT32_MIN) * FAULT_OVERFLOW),
    "min": (jnp.minimum(sa, sb), none),
    "max": (jnp.maximum(sa, sb), none),
    "eq": (sa == sb, none),
    "ne": (sa != sb, none),
    "lt": (sa < sb, none),
    "le": (sa <= sb, none),
    "gt": (sa > sb, none),
    "ge": (sa >= sb, none),
    "and": ((sa != 0) & (sb != 0), none),
    "or": ((sa != 0) | (sb != 0), none),
    "not": (sa == 0, none),
    "sel": (jnp.where(sa != 0, sb, sc), none),
    "gcd": (gcd, gcd_o * FAULT_OVERFLOW),
    "rand": (first, none),
    "choice": (picked[0], none),
    "len": (na, none),
    "sum": (lsum, lsum_o * FAULT_OVERFLOW),
    "lmin": (jnp.where(na > 0, lmin, 0), (na == 0) * FAULT_INDEX),
    "lmax": (jnp.where(na > 0, lmax, 0), (na == 0) * FAULT_INDEX),
    "argmin": (jnp.argmax(va & (la == lmin)), (na == 0) * FAULT_INDEX),
    "argmax": (jnp.argmax(va & (la == lmax)), (na == 0) * FAULT_INDEX),
    "count": (jnp.sum(hit), none),
    "find": (jnp.argmax(hit), ~jnp.any(hit) * FAULT_INDEX),
    "get": (jnp.where(g_ok, la[jnp.clip(gi, 0, lw - 1)], 0), ~g_ok * FAULT_INDEX),
    "match": (jnp.sum(short & (la == lb)), none),
    "leq": ((na == nb) & jnp.all(~va | (la == lb)), none),
    "dot": (dot, (jnp.any(short & prods_o) | dot_o) * FAULT_OVERFLOW),
  }
  assert tuple(scalar) == _SCALAR_OPS
  # List results: (values, length, fault bits).
  li, l_ok = _py_index(sa, nd)
  k = jnp.where(sb >= 0, jnp.minimum(sb, na), jnp.maximum(0, na + sb))
  rlen = jnp.where(sb > sa, sb - sa, 0)
  range_bad = (sb > sa) & ((rlen > lw) | (rlen <= 0))
  digs, ndig = decimal_digits(sa)
  digs = jnp.take_along_axis(digs, jnp.clip(10 - ndig + col, 0, 9), 0)
  lists = {
    "lset": (jnp.where((col == li) & l_ok, sb, ld), nd, ~l_ok * FAULT_INDEX),
    "push": (jnp.where(col == nd, sa, ld), jnp.minimum(nd + 1, lw), (nd >= lw) * FAULT_CAPACITY),
    "clear": (jnp.zeros(lw, jnp.int32), jnp.int32(0), none),
    "copy": (la, na, none),
    "sort": (sorted_vals, na, none),
    "rev": (la[jnp.clip(na - 1 - col, 0, lw - 1)], na, none),
    "take": (la, k, none),
    "shuffle": (picked, na, none),
    "sample": (picked, jnp.clip(sb, 0, na), none),
    "range": (sa + col, jnp.where(range_bad, 0, rlen), range_bad * FAULT_CAPACITY),
    "digits": (digs, jnp.where(sa < 0, 0, ndig), (sa < 0) * FAULT_INDEX),
    "rsample": (sa + drawn, draw_n, none),
  }
  assert tuple(lists) == _LIST_OPS
  s_idx = jnp.clip(op - OPCODE[_SCALAR_OPS[0]], 0, len(_SCALAR_OPS) - 1)
  s_val = jnp.stack([jnp.asarray(v, jnp.int32) for v, _ in scalar.values()])[s_idx]
  s_fault = jnp.stack([jnp.asarray(f, jnp.int32) for _, f in scalar.values()])[s_idx]
  l_idx = jnp.clip(op - OPCODE[_LIST_OPS[0]], 0, len(_LIST_OPS) - 1)
  l_val = jnp.stack([v for v, _, _ in lists.values()])[l_idx]
  l_len = jnp.stack([jnp.asarray(n, jnp.int32) for _, n, _ in lists.values()])[l_idx]
  l_fault = jnp.stack([jnp.asarray(f, jnp.int32) for _, _, f in lists.values()])[l_idx]
  writes_scalar = (op >= OPCODE[_SCALAR_OPS[0]]) & (op <= OPCODE[_SCALAR_OPS[-1]])
  writes_list = (op >= OPCODE[_LIST_OPS[0]]) & (op <= OPCODE[_LIST_OPS[-1]])
  fault = jnp.where(writes_scalar, s_fault, jnp.where(writes_list, l_fault, 0))
  fault = fault | draw_fault
  regs = jnp.where(writes_scalar & (jnp.arange(cfg.n_regfile) == dst), s_val, regs)
  l_val = jnp.where(col < l_len, l_val, 0)
  new_lists = jnp.where(writes_list & (jnp.arange(cfg.n_listfile) == dst)[:, None], l_val, m.lists)
  new_len = jnp.where(writes_list & (jnp.arange(cfg.n_listfile) == dst), l_len, m.list_len)
  # Log the drawn values.
  cap = cfg.n_draws
  over = m.n_draws + draw_n > cap
  window = jax.lax.dynamic_slice(m.draws, (m.n_draws,), (lw,))
  draws = jax.lax.dynamic_update_slice(
    m.draws, jnp.where(col < draw_n, drawn, window), (m.n_draws,)
  )
  return Machine(
    regs,
    new_lists,
    new_len,
    m.fault | fault | over * FAULT_CAPACITY,
    draws,
    jnp.minimum(m.n_draws + draw_n, cap),
    jnp.minimum(m.local + draw_n, cap),
  )


def next_pc(ins, regs, pc, cfg: ProgramConfig):
  """The instruction index after running ``ins`` at ``pc``: a taken jump's target (``jmp T``,
  ``jz a T`` if a == 0, ``jnz a T`` if a != 0), else ``pc + 1``. Jumps write nothing, so
  reading ``regs`` before or after `execute` gives the same answer."""
  op = ins[0]
  a = jnp.where(ins[2] == MODE_IMM, ins[3], regs[jnp.clip(ins[3], 0, cfg.n_regfile - 1)])
  taken = (op == OPCODE["jmp"]) | ((op == OPCODE["jz"]) & (a == 0))
  taken |= (op == OPCODE["jnz"]) & (a != 0)
  target = jnp.where(op == OPCODE["jmp"], ins[3], ins[5])
  return jnp.where(taken, target, pc + 1)
