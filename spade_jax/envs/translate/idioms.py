"""Translator: idioms that map onto single list instructions or exact closed forms.

* ``", ".join(map(str, xs))`` (or of ``str(x) for x in xs``) -> one list template slot, which
  renders ``"a, b, c"`` exactly as Python does (other joins are unrolled);
* ``sum(a == b for a, b in zip(xs, ys))`` -> ``match``; ``sum(a * b ...)`` -> ``dot`` (exact
  ``zip`` semantics, also for the answer's run-time length);
* ``sum(int(c) for c in str(n))`` for ``n >= 0`` -> ``digits`` + ``sum``;
* ``sum(1 for x in range(lo, hi) if x % k == 0)`` with ``k >= 1`` -> the exact count
  ``max(0, (hi - 1) // k - (lo - 1) // k)`` (run-time bounds allowed here only);
* any other ``sum`` of a generator over a constant-length iterable, run-time filters becoming
  ``sel(cond, x, 0)``.
"""

from __future__ import annotations

import ast

from spade_jax.envs.translate.ops import cat, int_like, max_len
from spade_jax.envs.translate.values import (
  INT32_MAX,
  INT32_MIN,
  LGUESS,
  NGUESS,
  Answer,
  Builtin,
  Int,
  Lst,
  Refusal,
  Text,
  bounds,
  const_int,
  snippet,
)


class Idioms:
  """``join`` and ``sum`` forms (mixed into the lowerer)."""

  # ------------------------------------------------------------------------------- idioms
  def call_join(self, sep: str, node):
    if len(node.args) != 1 or node.keywords:
      raise Refusal(f"`{snippet(node)}`: join takes one iterable", node)
    arg = node.args[0]
    inner = None  # the list whose ints are joined, for the list template slot
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "map":
      if len(arg.args) == 2 and self.expr(arg.args[0]) == Builtin("str"):
        inner = self.expr(arg.args[1])
    elif isinstance(arg, ast.GeneratorExp | ast.ListComp) and len(arg.generators) == 1:
      g = arg.generators[0]
      elt = arg.elt
      if (
        not g.ifs
        and isinstance(g.target, ast.Name)
        and isinstance(elt, ast.Call)
        and isinstance(elt.func, ast.Name)
        and elt.func.id == "str"
        and len(elt.args) == 1
        and isinstance(elt.args[0], ast.Name)
        and elt.args[0].id == g.target.id
      ):
        inner = self.expr(g.iter)
    if (
      sep == ", "
      and isinstance(inner, Lst)
      and (inner.elems is None or not all(const_int(x) for x in inner.elems))
    ):
      self.list_reg(inner, node)
      return Text([inner])
    parts = (
      [self.to_text(v, node) for v in self.iterate(inner, node)]
      if inner is not None
      else self.iterate(self.expr(arg), arg)
    )
    out = ""
    for i, p in enumerate(parts):
      if not isinstance(p, str | Text):
        raise Refusal(f"`{snippet(node)}` joins a non-text value", node)
      out = cat(out, p) if i == 0 else cat(cat(out, sep), p)
    return out

  def call_sum(self, node):
    if len(node.args) not in (1, 2) or node.keywords:
      raise Refusal(f"`{snippet(node)}`: sum takes an iterable and an optional start", node)
    start = self.expr(node.args[1]) if len(node.args) == 2 else 0
    arg = node.args[0]
    total = None
    if isinstance(arg, ast.GeneratorExp | ast.ListComp) and len(arg.generators) == 1:
      total = self.sum_zip(arg) or self.sum_digits(arg) or self.sum_multiples(arg)
      if total is None:
        total = self.sum_generic(arg, node)
    else:
      total = self.sum_list(self.lst_from(self.expr(arg), node, False), node)
    return self.arith("add", start, total, node)

  def sum_list(self, lst: Lst, node):
    if lst.elems is not None and lst.reg is None and len(lst.elems) <= 4:
      out = 0
      for v in lst.elems:
        out = self.arith("add", out, v, node)
      return out
    n = max_len(lst, self.cfg)
    return self.list_scalar("sum", lst, node, (), min(0, n * lst.lo), max(0, n * lst.hi))

  def _zip_operand(self, value, node) -> Lst:
    if isinstance(value, Answer):
      self.require(node, "truthy", "zipping it")
      return Lst(None, LGUESS, Int(NGUESS, 1, self.cfg.list_len), INT32_MIN, INT32_MAX, False)
    return self.lst_from(value, node, False)

  def sum_zip(self, arg):
    """``sum(a == b for a, b in zip(X, Y))`` -> ``match``; ``sum(a * b ...)`` -> ``dot``."""
    g, elt = arg.generators[0], arg.elt
    if g.ifs or not (isinstance(g.iter, ast.Call) and isinstance(g.iter.func, ast.Name)):
      return None
    if g.iter.func.id != "zip" or len(g.iter.args) != 2:
      return None
    if not (isinstance(g.target, ast.Tuple) and len(g.target.elts) == 2):
      return None
    names = [t.id if isinstance(t, ast.Name) else None for t in g.target.elts]
    if isinstance(elt, ast.Compare) and len(elt.ops) == 1 and isinstance(elt.ops[0], ast.Eq):
      op, sides = "match", [elt.left, elt.comparators[0]]
    elif isinstance(elt, ast.BinOp) and isinstance(elt.op, ast.Mult):
      op, sides = "dot", [elt.left, elt.right]
    else:
      return None
    if sorted(s.id if isinstance(s, ast.Name) else "" for s in sides) != sorted(
      n or "?" for n in names
    ):
      return None
    x, y = (self._zip_operand(self.expr(a), a) for a in g.iter.args)
    static = isinstance(x.length, int) and isinstance(y.length, int)
    if static and not (x.reg is not None and y.reg is not None):
      return None  # unrolled by sum_generic
    n = min(max_len(x, self.cfg), max_len(y, self.cfg))
    code = self.need_code(arg, "sum")
    a, b = self.list_operand(x, arg), self.list_operand(y, arg)
    if op == "match":
      return Int(code.scalar("match", a, b), 0, n)
    corners = [a * b for a in (x.lo, x.hi) for b in (y.lo, y.hi)]
    lo, hi = min(0, n * min(corners)), max(0, n * max(corners))
    if not (
      INT32_MIN <= min(corners)
      and max(corners) <= INT32_MAX
      and INT32_MIN <= lo
      and hi <= INT32_MAX
    ):
      raise Refusal(f"`{snippet(arg)}` may exceed int32", arg)
    return Int(code.scalar("dot", a, b), lo, hi)

  def sum_digits(self, arg):
    """``sum(int(c) for c in str(n))`` for ``n >= 0`` -> ``digits`` + ``sum``."""
    g, elt = arg.generators[0], arg.elt
    it = g.iter
    if g.ifs or not isinstance(g.target, ast.Name):
      return None
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "str"):
      return None
    if not (isinstance(elt, ast.Call) and isinstance(elt.func, ast.Name) and elt.func.id == "int"):
      return None
    if not (
      len(elt.args) == 1 and isinstance(elt.args[0], ast.Name) and elt.args[0].id == g.target.id
    ):
      return None
    n = self.check_int(self.expr(it.args[0]), it)
    if const_int(n):
      return sum(int(c) for c in str(int(n)))
    if n.lo < 0:
      raise Refusal(f"`{snippet(arg)}`: digits of a possibly negative number", arg)
    digits = self.list_result("digits", [n.reg], Int(NGUESS, 1, 10), 0, 9, arg)
    return self.list_scalar("sum", digits, arg, (), 0, 9 * len(str(n.hi)))

  def sum_multiples(self, arg):
    """``sum(1 for x in range(lo, hi) if x % k == 0)`` (run-time bounds, ``k >= 1`` proven)
    -> ``max(0, (hi - 1) // k - (lo - 1) // k)``, the exact count of multiples."""
    g, elt = arg.generators[0], arg.elt
    it = g.iter
    if not (isinstance(elt, ast.Constant) and elt.value == 1 and len(g.ifs) == 1):
      return None
    if not (isinstance(g.target, ast.Name) and isinstance(it, ast.Call) and not it.keywords):
      return None
    if not (isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) in (1, 2)):
      return None
    test = g.ifs[0]
    if not (
      isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
    ):
      return None
    mod, zero = test.left, test.comparators[0]
    if isinstance(mod, ast.Constant):
      mod, zero = zero, mod
    if not (isinstance(zero, ast.Constant) and zero.value == 0 and isinstance(mod, ast.BinOp)):
      return None
    if not (isinstance(mod.op, ast.Mod) and isinstance(mod.left, ast.Name)):
      return None
    if mod.left.id != g.target.id or any(
      isinstance(n, ast.Name) and n.id == g.target.id for n in ast.walk(mod.right)
    ):
      return None
    k = self.expr(mod.right)
    if not int_like(k) or bounds(k)[0] < 1:
      return None
    lo, hi = (0, self.expr(it.args[0])) if len(it.args) == 1 else map(self.expr, it.args)
    top = self.arith("div", self.arith("sub", hi, 1, it), k, arg)
    below = self.arith("div", self.arith("sub", lo, 1, it), k, arg)
    return self.minmax("max", 0, self.arith("sub", top, below, arg), arg)

  def sum_generic(self, arg, node):
    g = arg.generators[0]
    total = 0
    self.push_scope()
    try:
      for item in self.iterate(self.expr(g.iter), g.iter):
        self.bind(g.target, item)
        c = True
        for test in g.ifs:
          c = self.and_(c, self.condition(test), test)
        if c is False:
          continue
        v = self.guarded(c, arg.elt)
        if isinstance(v, bool):
          v = int(v)
        if isinstance(c, Int):
          v = self.sel(c, v, 0, node)
        total = self.arith("add", total, v, node)
    finally:
      self.pop_scope()
    return total
