"""Translator: loops as IR code -- ``for`` over ranges, lists, tables, digits, ``enumerate`` and
``zip`` (a counter, a bound and a backward jump), slices and comprehensions built by loops.
Functions of the `visitor.Visitor` (bound there as its methods)."""

from __future__ import annotations

import ast

from spade_jax.envs.translate.kinds import (
  ConstDict,
  Digits,
  Group,
  Int,
  It,
  Lst,
  Milli,
  Module,
  Range,
  Var,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.texts import Slot, Text

MAX_UNROLL = 16  # constant tuples of other values are unrolled up to this length


# ------------------------------------------------------------------------------- loops
def loop(self, target, iter_node, body, node) -> None:
  """``for target in iter_node: body()``: unrolled when the trip count is a compile-time
  constant of at most `MAX_UNROLL` (each item then has a constant index, so texts built in the
  body stay templates), else an IR loop over an index ``k`` (a counter, a bound read once, a
  backward jump)."""
  it = self.iterable(iter_node)
  if isinstance(it, It) and it[0] == "pairs":
    _pairs(self, target, it, body, node)
    return
  if not isinstance(it, It):
    items = tuple(it)
    if len(items) > MAX_UNROLL and all(isinstance(x, int) for x in items):
      it = It(("const", items))
    else:
      _unrolled(self, target, items, body, node)
      return
  n = static_len(it)
  if n is not None and n <= MAX_UNROLL:
    _unrolled(self, target, [lambda k=k: self.item_at(it, k, node) for k in range(n)], body, node)
    return
  e = self.e
  self.dynamic_loops += 1
  k, bound = e.local(), e.local()
  e.emit("set", k, 0)
  with e.statement():
    e.emit("set", bound, self.operand(self.length_of(it), node))
  top, cont, end = e.new_label(), e.new_label(), e.new_label()
  e.place(top)
  e.exit_unless_less(k, bound, end)
  self.frame.loops.append((cont, end))

  def looped():
    with e.statement():
      self.store(target, self.item_at(it, k, node), node)
    body()

  self.region_block(looped, loop=True)
  self.frame.loops.pop()
  e.place(cont)
  e.emit("add", k, k, 1)
  e.emit("jmp", top)
  e.place(end)


def _pairs(self, target, it, body, node) -> None:
  """``itertools.combinations(xs, 2)``: ``(xs[i], xs[j])`` for ``i < j``, two nested loops
  (``continue`` goes to the next pair, ``break`` leaves both)."""
  e = self.e
  _, reg = it
  self.dynamic_loops += 1
  i, j, n = e.local(), e.local(), e.local()
  e.emit("len", n, reg)
  e.emit("set", i, 0)
  outer, inner, cont, nxt, end = (e.new_label() for _ in range(5))
  e.place(outer)
  e.exit_unless_less(i, n, end)
  e.emit("add", j, i, 1)
  e.place(inner)
  e.exit_unless_less(j, n, nxt)
  self.frame.loops.append((cont, end))

  def looped():
    with e.statement():
      a, b = e.local(), e.local()
      e.emit("get", a, reg, i)
      e.emit("get", b, reg, j)
      self.store(target, (Int(a), Int(b)), node)
    body()

  self.region_block(looped, loop=True)
  self.frame.loops.pop()
  e.place(cont)
  e.emit("add", j, j, 1)
  e.emit("jmp", inner)
  e.place(nxt)
  e.emit("add", i, i, 1)
  e.emit("jmp", outer)
  e.place(end)


def _unrolled(self, target, items, body, node) -> None:
  end = self.e.new_label()
  for x in items:
    cont = self.e.new_label()
    self.frame.loops.append((cont, end))
    with self.e.statement():
      self.rebind(target, x() if callable(x) else x, node)
    body()
    self.frame.loops.pop()
    self.e.place(cont)
  self.e.place(end)


def static_len(it) -> int | None:
  kind = it[0]
  if kind == "range":
    _, lo, hi, step = it
    return len(range(lo, hi, step)) if isinstance(lo, int) and isinstance(hi, int) else None
  if kind == "list":
    return it[2]
  if kind == "const":
    return len(it[1])
  if kind == "enumerate":
    return static_len(it[1])
  if kind == "zip":
    a, b = static_len(it[1]), static_len(it[2])
    return None if a is None or b is None else min(a, b)
  return None


def iterable(self, node):
  """A constant tuple, or ("range", lo, hi, step) / ("list", reg) / ("const", values) /
  ("enumerate", it) / ("zip", it, it) / ("digits", list reg)."""
  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
    name = node.func.id
    if name == "enumerate" and not self.shadowed(name) and len(node.args) in (1, 2):
      start = self.read_var(self.expr(node.args[1])) if len(node.args) == 2 else 0
      if not isinstance(start, int):
        raise Refusal(f"`{snippet(node)}`: enumerate from a run-time start", node)
      inner = self.iterable(node.args[0])
      if not isinstance(inner, It):
        return tuple(enumerate(inner, start))
      return It(("enumerate", inner, start))
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
      return It(("list", r, self.as_list(v, node).length))
  if (
    isinstance(node, ast.Call)
    and isinstance(node.func, ast.Attribute)
    and isinstance(node.func.value, ast.Name)
    and self.lookup(node.func.value.id, node) == Module("itertools")
    and node.func.attr == "combinations"
    and len(node.args) == 2
    and not node.keywords
  ):
    if self.read_var(self.expr(node.args[1])) != 2:
      raise Refusal(f"`{snippet(node)}`: combinations of other sizes than 2", node)
    return It(("pairs", self.as_list(self.expr(node.args[0]), node).reg))
  v = self.read_var(self.expr(node))
  if isinstance(v, ConstDict):
    return v.keys
  if isinstance(v, Group):
    return It(("digits", self.group_digits(v, node).reg))
  if isinstance(v, Range):
    return It(("range", v.lo, v.hi, v.step))
  if isinstance(v, tuple):
    return v
  if isinstance(v, str):
    return tuple(v)
  if isinstance(v, Text) and v.constant is not None:
    return tuple(v.constant)
  if isinstance(v, Lst):
    return It(("list", v.reg, v.length))
  if isinstance(v, Var) and v.kind == "list":
    return It(("list", v.ref, None))
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
    if kind == "list" and it[2] is not None:
      return it[2]
    r = self.e.temp()
    self.e.emit("len", r, it[1])
    return Int(r)
  if kind == "const":
    return len(it[1])
  if kind == "range":
    _, lo, hi, step = it
    if step > 0:
      n = self.binop(
        ast.FloorDiv,
        self.binop(ast.Add, self.binop(ast.Sub, hi, lo, None), step - 1, None),
        step,
        None,
      )
    else:
      n = self.binop(
        ast.FloorDiv,
        self.binop(ast.Add, self.binop(ast.Sub, lo, hi, None), -step - 1, None),
        -step,
        None,
      )
    return self.minmax("max", [0, n])
  if kind == "enumerate":
    return self.length_of(it[1])
  if kind == "zip":
    return self.minmax("min", [self.length_of(it[1]), self.length_of(it[2])])
  raise AssertionError(kind)


def item_at(self, it, k, node):
  """The ``k``-th item (``k`` a register or a constant index)."""
  kind = it[0]
  if kind == "range":
    _, lo, hi, step = it
    if isinstance(k, int):
      return self.binop(ast.Add, lo, k * step, node)
    return self.binop(ast.Add, lo, self.binop(ast.Mult, Int(k), step, node), node)
  if kind in ("list", "digits"):
    r = self.e.local()
    self.e.emit("get", r, it[1], k)
    return Int(r) if kind == "list" else Digits(Int(r))
  if kind == "const":
    if isinstance(k, int):
      return it[1][k]
    return self.bind_once(self.const_get(it[1], Int(k), node))
  if kind == "enumerate":
    index = it[2] + k if isinstance(k, int) else self.binop(ast.Add, Int(k), it[2], node)
    return (self.bind_once(index), self.item_at(it[1], k, node))
  if kind == "zip":
    return (self.item_at(it[1], k, node), self.item_at(it[2], k, node))
  raise AssertionError(kind)


def slice(self, base, sl, node):
  lo = self.expr(sl.lower) if sl.lower is not None else None
  hi = self.expr(sl.upper) if sl.upper is not None else None
  step = self.expr(sl.step) if sl.step is not None else None
  if is_const(base) and is_const(lo) and is_const(hi) and is_const(step):
    return base[lo:hi:step]
  lst = self.as_list(base, node)
  if lst.length is not None and all(isinstance(x, int | type(None)) for x in (lo, hi, step)):
    idx = range(lst.length)[lo:hi:step]  # a static slice of a static list: unrolled
    r = self.e.temp_list()
    self.e.emit("clear", r)
    for k in idx:
      self.push_get(r, lst.reg, k)
    return Lst(r, len(idx))
  if step not in (None, 1):
    if step == -1 and lo is None and hi is None:
      r = self.e.temp_list()
      self.e.emit("rev", r, lst.reg)
      return Lst(r, lst.length)
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
  self.count_loop(start, stop, lambda i: self.push_get(r, lst.reg, i))
  return Lst(r)


def push_get(self, dst, src, i):
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
  self.e.place(top)
  self.e.exit_unless_less(i, stop, end)
  body(i)
  self.e.emit("add", i, i, 1)
  self.e.emit("jmp", top)
  self.e.place(end)


def extend(self, dst: str, src: Lst, node) -> None:
  n = self.e.temp()
  self.e.emit("len", n, src.reg)
  self.count_loop(0, n, lambda i: self.push_get(dst, src.reg, i))


def expr_ListComp(self, node):
  return self.comprehension(node)


def expr_GeneratorExp(self, node):
  return self.comprehension(node)


def comprehension(self, node):
  """A list comprehension / generator as a loop pushing onto a fresh list."""
  r = self.e.local_list()
  self.e.emit("clear", r)
  pushes, dynamic = [0], self.dynamic_loops

  def push():
    pushes[0] += 1
    self.push_value(r, node.elt, node)

  self.comp_loops(node.generators, push, node)
  static = self.dynamic_loops == dynamic and not any(g.ifs for g in node.generators)
  return Lst(r, pushes[0] if static else None)


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

  self.comp_loops(node.generators, inner, node)
  if how in ("min", "max"):  # ValueError on an empty sequence: fault as Python raises
    ok, empty, t = e.new_label(), e.temp_list(), e.temp()
    e.emit("jnz", seen, ok)
    e.emit("clear", empty)
    e.emit("lmin", t, empty)
    e.place(ok)
  return Int(acc, how in ("any", "all"))


def push_value(self, r, elt, node):
  v = self.expr(elt)
  if isinstance(v, bool):
    v = int(v)
  self.e.emit("push", r, self.operand(self.as_int(v, node), node))


def comp_loops(self, gens, inner, node):
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
        self.comp_loops(gens[1:], inner, node)
      else:
        inner()
      self.e.place(skip)

  self.loop(g.target, g.iter, body, node)
