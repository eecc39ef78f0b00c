"""Translator: loops as IR code -- ``for`` over ranges, lists, tables, digits, ``enumerate`` and
``zip`` (a counter, a bound and a backward jump), slices and comprehensions built by loops.
Functions of the `visitor.Visitor` (bound there as its methods)."""

from __future__ import annotations

import ast

from spade_jax.envs.translate.kinds import (
  Digits,
  Int,
  It,
  Lst,
  Milli,
  Range,
  Var,
  is_const,
)
from spade_jax.envs.translate.texts import Slot, Text
from spade_jax.envs.translate.values import Refusal, snippet

MAX_UNROLL = 16  # constant tuples of other values are unrolled up to this length


# ------------------------------------------------------------------------------- loops
def loop(self, target, iter_node, body, node) -> None:
  """``for target in iter_node: body()`` as an IR loop (short constant tuples unroll)."""
  it = self.iterable(iter_node)
  if not isinstance(it, It):
    if len(it) > MAX_UNROLL and all(isinstance(x, int) for x in it):
      it = It(("const", tuple(it)))
    else:
      end = self.e.new_label()
      for x in it:
        cont = self.e.new_label()
        self.frame.loops.append((cont, end))
        self.store(target, x, node)
        body()
        self.frame.loops.pop()
        self.e.place(cont)
      self.e.place(end)
      return
  kind = it[0]
  if kind == "range":
    _, lo, hi, step = it
    count, item = None, None
  else:  # ("list", reg) | ("const", values) | ("zip"/"enumerate", ...)
    lo, step = 0, 1
    hi = self.length_of(it)
  i = self.e.local()
  self.e.emit("set", i, self.operand(lo, node))
  hi_op = self.operand(hi, node)
  if not isinstance(hi_op, int) and not self.e.is_temp(hi_op):
    pass
  hi_reg = self.e.local()
  self.e.emit("set", hi_reg, hi_op)
  top, cont, end = self.e.new_label(), self.e.new_label(), self.e.new_label()
  self.e.place(top)
  c = self.e.temp()
  self.e.emit("lt" if step > 0 else "gt", c, i, hi_reg)
  self.e.emit("jz", c, end)
  count, item = i, self.item_at(it, i, node)
  self.frame.loops.append((cont, end))
  with self.e.statement():
    self.store(target, item, node)
  body()
  self.frame.loops.pop()
  self.e.place(cont)
  self.e.emit("add", i, i, step)
  self.e.emit("jmp", top)
  self.e.place(end)
  del count


def iterable(self, node):
  """A constant tuple, or ("range", lo, hi, step) / ("list", reg) / ("const", values) /
  ("enumerate", it) / ("zip", it, it) / ("digits", list reg)."""
  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
    name = node.func.id
    if name == "enumerate" and not self.shadowed(name):
      inner = self.iterable(node.args[0])
      if not isinstance(inner, It):
        return tuple(enumerate(inner))
      return It(("enumerate", inner))
    if name == "zip" and not self.shadowed(name) and len(node.args) == 2:
      a, b = (self.iterable(x) for x in node.args)
      if not isinstance(a, It) and not isinstance(b, It):
        return tuple(zip(a, b, strict=False))
      return It(("zip", self.seq_iter(a, node), self.seq_iter(b, node)))
    if name == "reversed" and not self.shadowed(name):
      v = self.expr(node.args[0])
      if isinstance(v, tuple):
        return tuple(reversed(v))
      r = self.e.temp_list()
      self.e.emit("rev", r, self.as_list(v, node).reg)
      return It(("list", r))
  v = self.read_var(self.expr(node))
  if isinstance(v, Range):
    return It(("range", v.lo, v.hi, v.step))
  if isinstance(v, tuple):
    return v
  if isinstance(v, str):
    return tuple(v)
  if isinstance(v, Text) and v.constant is not None:
    return tuple(v.constant)
  if isinstance(v, Lst):
    return It(("list", v.reg))
  if isinstance(v, Var) and v.kind == "list":
    return It(("list", v.ref))
  if isinstance(v, Text) and len(v.alts) == 1 and len(v.alts[0]) == 1:
    slot = v.alts[0][0]
    if isinstance(slot, Slot) and not slot.is_list:  # str(n): its digit characters
      r = self.e.temp_list()
      self.e.emit("digits", r, slot.name)
      return It(("digits", r))
  raise Refusal(f"`{snippet(node)}` is not an iterable the translator can loop over", node)


def seq_iter(self, it, node):
  if not isinstance(it, It):
    if all(isinstance(x, int) for x in it):
      return It(("const", tuple(it)))
    raise Refusal(f"`{snippet(node)}`: zip of a run-time list with non-int constants", node)
  if it[0] in ("list", "const", "digits"):
    return it
  if it[0] == "range" and it[3] == 1:
    return it
  raise Refusal(f"`{snippet(node)}`: zip of this iterable is outside the subset", node)


def length_of(self, it):
  kind = it[0]
  if kind in ("list", "digits"):
    r = self.e.temp()
    self.e.emit("len", r, it[1])
    return Int(r)
  if kind == "const":
    return len(it[1])
  if kind == "range":
    _, lo, hi, step = it
    n = self.binop(ast.Sub, hi, lo, None)
    return self.minmax("max", [0, n])
  if kind == "enumerate":
    return self.length_of(it[1])
  if kind == "zip":
    return self.minmax("min", [self.length_of(it[1]), self.length_of(it[2])])
  raise AssertionError(kind)


def item_at(self, it, i: str, node):
  kind = it[0]
  if kind == "range":
    return Int(i)
  if kind == "list":
    r = self.e.local()
    self.e.emit("get", r, it[1], i)
    return Int(r)
  if kind == "const":
    return self.bind_once(self.const_get(it[1], Int(i), node))
  if kind == "digits":
    r = self.e.local()
    self.e.emit("get", r, it[1], i)
    return Digits(Int(r))
  if kind == "enumerate":
    return (Int(i), self.item_at(it[1], i, node))
  if kind == "zip":
    return (self.item_at(it[1], i, node), self.item_at(it[2], i, node))
  raise AssertionError(kind)


def slice(self, base, sl, node):
  lo = self.expr(sl.lower) if sl.lower is not None else None
  hi = self.expr(sl.upper) if sl.upper is not None else None
  step = self.expr(sl.step) if sl.step is not None else None
  if is_const(base) and is_const(lo) and is_const(hi) and is_const(step):
    return base[lo:hi:step]
  lst = self.as_list(base, node)
  if step not in (None, 1):
    if step == -1 and lo is None and hi is None:
      r = self.e.temp_list()
      self.e.emit("rev", r, lst.reg)
      return Lst(r)
    raise Refusal(f"`{snippet(node)}`: slices with a step", node)
  r = self.e.temp_list()
  if lo in (None, 0):
    self.e.emit(
      "take", r, lst.reg, self.operand(self.as_int(hi, node), node) if hi is not None else 2**31 - 1
    )
    return Lst(r)
  # general slice: a loop over the indexes
  n = self.e.temp()
  self.e.emit("len", n, lst.reg)
  start = self.clamp_index(lo, n, node)
  stop = self.clamp_index(hi, n, node) if hi is not None else n
  self.e.emit("clear", r)
  self.count_loop(start, stop, lambda i: self._push_get(r, lst.reg, i))
  return Lst(r)


def _push_get(self, dst, src, i):
  t = self.e.temp()
  self.e.emit("get", t, src, i)
  self.e.emit("push", dst, t)


def clamp_index(self, v, n, node):
  """Python slice bound semantics for an int ``v`` and length ``n``."""
  x = self.operand(self.as_int(v, node), node)
  r = self.e.local()
  t = self.e.temp()
  self.e.emit("add", r, x, n)
  self.e.emit("lt", t, x, 0)
  self.e.emit("sel", r, t, r, x)
  self.e.emit("max", r, r, 0)
  self.e.emit("min", r, r, n)
  return r


def count_loop(self, start, stop, body) -> None:
  i = self.e.local()
  self.e.emit("set", i, start)
  top, end = self.e.new_label(), self.e.new_label()
  t = self.e.temp()
  self.e.place(top)
  self.e.emit("lt", t, i, stop)
  self.e.emit("jz", t, end)
  body(i)
  self.e.emit("add", i, i, 1)
  self.e.emit("jmp", top)
  self.e.place(end)


def extend(self, dst: str, src: Lst, node) -> None:
  n = self.e.temp()
  self.e.emit("len", n, src.reg)
  self.count_loop(0, n, lambda i: self._push_get(dst, src.reg, i))


def expr_ListComp(self, node):
  return self.comprehension(node, "list")


def expr_GeneratorExp(self, node):
  return self.comprehension(node, "list")


def comprehension(self, node, how):
  """A list comprehension / generator as a loop pushing onto a fresh list."""
  r = self.e.local_list()
  self.e.emit("clear", r)
  self._comp_loops(node.generators, lambda: self._push_value(r, node.elt, node), node)
  return Lst(r)


def reduce_comprehension(self, node, how: str):
  """``sum/any/all/min/max`` of a generator as a loop over an accumulator (no list built).
  ``min``/``max`` of nothing raise in Python: here ``FAULT_INDEX`` (a ``get`` of an empty
  list), so the check sees the same failure."""
  e = self.e
  acc, seen = e.local(), e.local()
  e.emit("set", acc, {"sum": 0, "any": 0, "all": 1}.get(how, 0))
  e.emit("set", seen, 0)

  def inner():
    v = self.read_var(self.expr(node.elt))
    if how in ("any", "all"):
      c = self.truth(v, node)
      c = int(c) if isinstance(c, bool) else c
      e.emit("ne", seen, c, 0)
      e.emit("or" if how == "any" else "and", acc, acc, seen)
      return
    if isinstance(v, float | Milli):
      raise Refusal(f"`{snippet(node)}`: {how} of floats over a loop", node)
    x = self.operand(self.as_int(v, node), node)
    if how == "sum":
      e.emit("add", acc, acc, x)
      return
    t = e.temp()
    e.emit(how, t, acc, x)
    e.emit("sel", acc, seen, t, x)
    e.emit("set", seen, 1)

  self._comp_loops(node.generators, inner, node)
  if how in ("min", "max"):  # ValueError on an empty sequence: fault as Python raises
    ok, empty, t = e.new_label(), e.temp_list(), e.temp()
    e.emit("jnz", seen, ok)
    e.emit("clear", empty)
    e.emit("lmin", t, empty)
    e.place(ok)
  return Int(acc, how in ("any", "all"))


def _push_value(self, r, elt, node):
  v = self.expr(elt)
  if isinstance(v, bool):
    v = int(v)
  self.e.emit("push", r, self.operand(self.as_int(v, node), node))


def _comp_loops(self, gens, inner, node):
  g = gens[0]
  if g.is_async:
    raise Refusal("async comprehension", node)
  names = {n.id for n in ast.walk(g.target) if isinstance(n, ast.Name)}
  self.frame.multi |= names
  for n in names:
    self.frame.names.pop(n, None)

  def body():
    with self.e.statement():
      skip = self.e.new_label()
      for cond in g.ifs:
        c = self.cond(cond)
        if c is False:
          self.e.emit("jmp", skip)
        elif c is not True:
          self.e.emit("jz", c, skip)
      if len(gens) > 1:
        self._comp_loops(gens[1:], inner, node)
      else:
        inner()
      self.e.place(skip)

  self.loop(g.target, g.iter, body, node)
