"""Translator: comparisons, ``in``, conditional expressions and selections between typed
values, and dict lookups. Functions of the `visitor.Visitor` (bound there as its methods)."""

from __future__ import annotations

import ast

from spade_jax.envs.translate import texts as tx
from spade_jax.envs.translate.kinds import (
  AnswerInts,
  ConstDict,
  Info,
  Int,
  Lst,
  Match,
  MaybeInt,
  Milli,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.texts import Text

_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_CMP = {
  "eq": lambda a, b: a == b,
  "ne": lambda a, b: a != b,
  "lt": lambda a, b: a < b,
  "le": lambda a, b: a <= b,
  "gt": lambda a, b: a > b,
  "ge": lambda a, b: a >= b,
}


def expr_Compare(self, node):
  left = self.expr(node.left)
  acc = None
  for op, right_node in zip(node.ops, node.comparators, strict=True):
    right = self.expr(right_node)
    c = self.compare(op, left, right, node)
    left = right
    if isinstance(c, bool):
      if not c:
        return False
      continue
    if acc is None:
      acc = c
    else:
      r = self.e.temp()
      self.e.emit("and", r, acc, c)
      acc = r
  return True if acc is None else Int(acc, True)


def compare(self, op, a, b, node):
  a, b = self.read_var(a), self.read_var(b)
  if isinstance(op, ast.Is | ast.IsNot):
    if b is not None:
      raise Refusal(f"`{snippet(node)}`: `is` only with None", node)
    if isinstance(a, MaybeInt):
      return a.present if isinstance(op, ast.IsNot) else self.negate(a.present)
    if isinstance(a, Match | AnswerInts):
      c = "found" if isinstance(a, AnswerInts) else self.match_found(a, node)
      return c if isinstance(op, ast.IsNot) else self.negate(c)
    if a is None:
      return isinstance(op, ast.Is)
    return isinstance(op, ast.IsNot)
  if isinstance(op, ast.In | ast.NotIn):
    c = self.contains(b, a, node)
    return c if isinstance(op, ast.In) else self.negate(c)
  name = _CMP.get(type(op))
  if name is None:
    raise Refusal(f"`{snippet(node)}`: comparison outside the subset", node)
  if is_const(a) and is_const(b):
    return _PY_CMP[name](a, b)
  if isinstance(a, str | Text) or isinstance(b, str | Text):
    return self.text_compare(name, a, b, node)
  if isinstance(a, float | Milli) or isinstance(b, float | Milli):
    x, y = self.milli_operand(a, node), self.milli_operand(b, node)
  elif isinstance(a, Lst | tuple) and isinstance(b, Lst | tuple) and name in ("eq", "ne"):
    r = self.e.temp()
    self.e.emit("leq", r, self.as_list(a, node).reg, self.as_list(b, node).reg)
    return r if name == "eq" else self.negate(r)
  else:
    x = self.operand(self.as_int(a, node), node)
    y = self.operand(self.as_int(b, node), node)
  r = self.e.temp()
  self.e.emit(name, r, x, y)
  return r


def text_compare(self, name, a, b, node):
  """Equality of a text chosen among constant alternatives with a constant string."""
  if name not in ("eq", "ne"):
    raise Refusal(f"`{snippet(node)}`: ordering of strings", node)
  if isinstance(a, str):
    a, b = b, a
  if not (isinstance(a, Text) and isinstance(b, str)):
    raise Refusal(f"`{snippet(node)}`: comparison of run-time strings", node)
  hits = []
  for i, alt in enumerate(a.alts):
    if not all(isinstance(x, str) for x in alt):
      raise Refusal(f"`{snippet(node)}`: comparison of a text with numbers in it", node)
    if "".join(alt) == b:
      hits.append(i)
  acc: object = False
  for i in hits:
    r = self.e.temp()
    self.e.emit("eq", r, tx.selector(a), i)
    acc = r if acc is False else self.or_(acc, r)
  if name == "ne":
    return self.negate(acc) if acc is not False else True
  return acc


def or_(self, a, b):
  r = self.e.temp()
  self.e.emit("or", r, a, b)
  return r


def negate(self, c):
  if isinstance(c, bool):
    return not c
  r = self.e.temp()
  self.e.emit("not", r, c)
  return r


def contains(self, seq, x, node):
  if isinstance(seq, tuple | str) and is_const(x):
    return x in seq
  if isinstance(seq, tuple):
    acc: object = False
    for y in seq:
      c = self.compare(ast.Eq(), x, y, node)
      if c is True:
        return True
      if c is not False:
        acc = c if acc is False else self.or_(acc, c)
    return acc
  if isinstance(seq, Lst):
    r = self.e.temp()
    self.e.emit("count", r, seq.reg, self.operand(self.as_int(x, node), node))
    self.e.emit("gt", r, r, 0)
    return r
  if isinstance(seq, str | Text) and isinstance(x, str | Text):
    raise Refusal(f"`{snippet(node)}`: substring tests", node)
  raise Refusal(f"`{snippet(node)}`: `in` on this value", node)


def expr_IfExp(self, node):
  c = self.cond(node.test)
  if isinstance(c, bool):
    return self.expr(node.body if c else node.orelse)
  if not (pure(node.body) and pure(node.orelse)):
    return self.branch_value(c, node.body, node.orelse, node)
  a, b = self.expr(node.body), self.expr(node.orelse)
  return self.select(c, a, b, node)


def pure(node) -> bool:
  """No call, division or index: evaluating it on both paths cannot draw or fault."""
  return not any(
    isinstance(n, ast.Call | ast.Subscript)
    or (isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv | ast.Mod | ast.Div))
    for n in ast.walk(node)
  )


def branch_value(self, c, body, orelse, node):
  """``body if c else orelse`` with each side lowered only on its own path (a draw or a
  division happens only where Python evaluates it)."""
  e = self.e
  other, end = e.new_label(), e.new_label()
  e.emit("jz", c, other)
  var = None

  def side(expr_node):
    nonlocal var
    v = self.read_var(self.expr(expr_node))
    if var is None:
      var = self.new_var(v, node)
      if isinstance(var.ref, tx.TextVar):
        var.ref.home = True  # both sides' texts stay alternatives
    self.write_var(var, v, node)

  self.region_block(lambda: side(body))
  e.emit("jmp", end)
  e.place(other)
  self.region_block(lambda: side(orelse))
  e.place(end)
  return self.read_var(var)


def select(self, c, a, b, node):
  a, b = self.read_var(a), self.read_var(b)
  if (is_const(a) or isinstance(a, Info)) and a == b:
    return a
  if isinstance(a, str | Text) or isinstance(b, str | Text):
    return tx.select(c, self.as_text(a, node), self.as_text(b, node), self.e, node)
  if isinstance(a, float | Milli) or isinstance(b, float | Milli):
    r = self.e.temp()
    self.e.emit("sel", r, c, self.milli_operand(a, node), self.milli_operand(b, node))
    return Milli(r)
  if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
    return tuple(self.select(c, x, y, node) for x, y in zip(a, b, strict=True))
  if isinstance(a, Lst) or isinstance(b, Lst):
    raise Refusal(f"`{snippet(node)}`: choosing between lists", node)
  boolean = all(isinstance(v, bool) or (isinstance(v, Int) and v.boolean) for v in (a, b))
  r = self.e.temp()
  x = self.operand(self.as_int(a, node), node)
  y = self.operand(self.as_int(b, node), node)
  self.e.emit("sel", r, c, x, y)
  return Int(r, boolean)


def dict_get(self, d: ConstDict, key, node, default=None, has_default=False):
  """``d[key]`` / ``d.get(key, default)``: a constant key picks its value; a run-time key is a
  selection among the values (a missing key gives ``default``, or faults like KeyError)."""
  key = self.read_var(key)
  if is_const(key):
    if key in d.keys:
      return d.values[d.keys.index(key)]
    if has_default:
      return default
    raise Refusal(f"`{snippet(node)}` raises KeyError", node)
  if not all(isinstance(k, int) for k in d.keys):
    raise Refusal(f"`{snippet(node)}`: run-time lookup by a string key", node)
  k = self.as_int(key, node)
  if has_default:
    out = default
  else:  # KeyError: the index of an empty list faults
    empty, miss = self.e.temp_list(), self.e.temp()
    self.e.emit("clear", empty)
    hit = self.contains(tuple(d.keys), k, node)
    done = self.e.new_label()
    self.e.emit("jnz", hit, done)
    self.e.emit("lmin", miss, empty)
    self.e.place(done)
    out = d.values[-1]
  for kk, vv in zip(d.keys, d.values, strict=True):
    c = self.e.temp()
    self.e.emit("eq", c, self.operand(k, node), kk)
    out = self.select(c, vv, out, node)
  return out
