"""Translator: conditions and coercions between the typed values (int, thousandths, list, text)
and operands. Functions of the `visitor.Visitor` (bound there as its methods)."""

from __future__ import annotations

from spade_jax.envs.translate import texts as tx
from spade_jax.envs.translate.kinds import (
  ActionText,
  Digits,
  Group,
  Int,
  Lst,
  Match,
  MaybeInt,
  Milli,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.texts import Slot, Text


# -------------------------------------------------------------------------------- truth
def cond(self, node):
  """A condition: a Python bool (decided now) or a register holding 0/1."""
  return self.truth(self.expr(node), node)


def truth(self, v, node):
  v = self.read_var(v)
  if is_const(v):
    return bool(v)
  if isinstance(v, Int):
    return v.reg
  if isinstance(v, Milli):
    return v.reg
  if isinstance(v, Match):
    return self.match_found(v, node)
  if isinstance(v, MaybeInt):
    r = self.e.temp()
    self.e.emit("ne", r, v.reg, 0)
    self.e.emit("and", r, r, v.present)
    return r
  if isinstance(v, Lst):
    r = self.e.temp()
    self.e.emit("len", r, v.reg)
    return r
  if isinstance(v, Text):
    if all(bool("".join(a)) for a in v.alts if all(isinstance(i, str) for i in a)):
      if all(any(i for i in a) for a in v.alts):
        return True
    raise Refusal(f"`{snippet(node)}`: truth of a run-time text", node)
  raise Refusal(f"`{snippet(node)}`: truth of this value", node)


# --------------------------------------------------------------------------------- coerce
def as_int(self, v, node) -> Int | int:
  v = self.read_var(v)
  if isinstance(v, MaybeInt):  # used as an int: None would have raised in Python
    return Int(v.reg)
  if isinstance(v, Digits):
    raise Refusal(f"`{snippet(node)}`: a digit character used as a number (use int())", node)
  if isinstance(v, bool):
    return int(v)
  if isinstance(v, int):
    return v
  if isinstance(v, Int):
    return v
  raise Refusal(f"`{snippet(node)}`: expected an int, got {kind_name(v)}", node)


def operand(self, v, node):
  v = self.as_int(v, node) if not isinstance(v, str) else v
  if isinstance(v, int):
    if not -(2**31) <= v < 2**31:
      raise Refusal(f"`{snippet(node)}`: constant {v} exceeds int32", node)
    return v
  return v.reg if isinstance(v, Int) else v


def milli_operand(self, v, node):
  v = self.read_var(v)
  if isinstance(v, Milli):
    return v.reg
  if isinstance(v, bool | int | float) and not isinstance(v, Int):
    m = v * 1000
    if abs(m - round(m)) > 1e-9:
      raise Refusal(f"`{snippet(node)}`: {v} is not a multiple of 0.001", node)
    return int(round(m))
  if isinstance(v, Int):
    r = self.e.temp()
    self.e.emit("mul", r, v.reg, 1000)
    return r
  raise Refusal(f"`{snippet(node)}`: expected a number, got {kind_name(v)}", node)


def as_list(self, v, node) -> Lst:
  v = self.read_var(v)
  if isinstance(v, Lst):
    return v
  if isinstance(v, tuple) and all(isinstance(x, int) for x in v):
    r = self.e.temp_list()
    if v:
      self.e.emit("copy", r, self.e.table(v, node))
    else:
      self.e.emit("clear", r)
    return Lst(r, len(v))
  if isinstance(v, tuple):
    r = self.e.temp_list()
    self.e.emit("clear", r)
    for x in v:
      self.e.emit("push", r, self.operand(self.as_int(x, node), node))
    return Lst(r, len(v))
  raise Refusal(f"`{snippet(node)}`: expected a list of ints, got {kind_name(v)}", node)


def as_text(self, v, node) -> Text:
  v = self.read_var(v)
  if isinstance(v, Text):
    return v
  if isinstance(v, str):
    return Text.of(v)
  if isinstance(v, bool):
    return Text.of(str(v))
  if is_const(v) and not isinstance(v, tuple):
    return Text.of(str(v))
  if isinstance(v, Int):
    if v.boolean:
      return tx.select(v.reg, Text.of("True"), Text.of("False"), self.e, node)
    return Text.of(Slot(self.slot_copy(v.reg)))
  if isinstance(v, Lst):
    r = self.e.local_list()
    self.e.emit("copy", r, v.reg)
    return tx.concat(tx.concat(Text.of("["), Text.of(Slot(r)), self.e), Text.of("]"), self.e)
  if isinstance(v, Digits):
    return Text.of(Slot(self.slot_copy(v.value.reg)))
  if isinstance(v, Group) and v.grammar:  # the answer's digits as shown (approximate)
    self.env.use_grammar(v.grammar, v.last, node)
    return Text.of(Slot(self.slot_copy("guess")))
  raise Refusal(f"`{snippet(node)}`: {kind_name(v)} shown as text", node)


def slot_copy(self, reg: str) -> str:
  """A register a template may show at the end of the call: a pinned copy."""
  if self.e.is_temp(reg):
    return self.e.pin(reg)
  r = self.e.local()
  self.e.emit("set", r, reg)
  return r


def minmax(self, name, vals):
  out = vals[0]
  for v in vals[1:]:
    if is_const(out) and is_const(v):
      out = min(out, v) if name == "min" else max(out, v)
      continue
    r = self.e.temp()
    if isinstance(out, float | Milli) or isinstance(v, float | Milli):
      self.e.emit(name, r, self.milli_operand(out, None), self.milli_operand(v, None))
      out = Milli(r)
    else:
      self.e.emit(name, r, self.operand(out, None), self.operand(v, None))
      out = Int(r)
  return out


def match_found(self, m: Match, node) -> str:
  self.env.use_grammar(m.grammar, None, node)
  if m.groups == 1 and m.lo is None:
    return m.test
  if m.groups == 1:  # an approximate grammar: the value must be in its range
    r, t = self.e.temp(), self.e.temp()
    self.e.emit("ge", r, "guess", m.lo)
    self.e.emit("le", t, "guess", m.hi)
    self.e.emit("and", r, r, t)
    self.e.emit("and", r, r, "found")
    return r
  r = self.e.temp()
  self.e.emit("eq", r, "nguess", m.groups)  # nguess is 0 when nothing was found
  return r


def kind_name(v) -> str:
  if isinstance(v, Text | str):
    return "text"
  if isinstance(v, Lst):
    return "a list"
  if isinstance(v, Milli | float):
    return "a float"
  if isinstance(v, Match | Group):
    return "a regex match"
  if isinstance(v, ActionText):
    return "the action text"
  return type(v).__name__


def const_get(self, values, idx, node) -> Int:
  """``values[idx]`` for a constant int tuple of any length and a run-time index in range
  (tables of ``list_len`` values; longer tuples are split and the chunk selected)."""
  e, n_cap = self.e, self.e.cfg.list_len
  i = self.operand(idx, node)
  r = e.temp()
  if len(values) <= n_cap:
    e.emit("get", r, e.table(values, node), i)
    return Int(r)
  chunks = [values[k : k + n_cap] for k in range(0, len(values), n_cap)]
  if len(chunks) > 4:
    raise Refusal(f"`{snippet(node)}`: a constant list of {len(values)} values", node)
  t, c = e.temp(), e.temp()
  e.emit("set", r, 0)
  for k, chunk in enumerate(chunks):
    e.emit("sub", t, i, k * n_cap)
    e.emit("max", t, t, 0)
    e.emit("min", t, t, len(chunk) - 1)
    e.emit("get", t, e.table(chunk, node), t)
    e.emit("div", c, i, n_cap)
    e.emit("eq", c, c, k)
    e.emit("sel", r, c, t, r)
  return Int(r)
