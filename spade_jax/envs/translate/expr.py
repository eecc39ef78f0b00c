"""Translator: expressions -- names, constants, operators, ``and``/``or``/``not`` and
conditional expressions (both sides evaluated, merged with ``sel``; the side Python may skip
is evaluated under a guard, so a draw or mutation there is refused), comparisons (ints, lists,
the parsed answer, ``in``, ``is None``) and truth values. Subscripts, f-strings and
comprehensions are in `seq.py`, guards' facts in `facts.py`.
"""

from __future__ import annotations

import ast

from spade_jax.envs.translate.facts import Facts
from spade_jax.envs.translate.ops import BINOPS, CMPOPS, cat, int_like, kind_name
from spade_jax.envs.translate.seq import Seqs
from spade_jax.envs.translate.values import (
  FOUND,
  LGUESS,
  NGUESS,
  Answer,
  Choice,
  Int,
  Lst,
  Matches,
  MatchObj,
  Refusal,
  Seed,
  Text,
  Undefined,
  const_int,
  is_const,
  snippet,
)

BUILTINS = frozenset(
  "int str len abs min max sum sorted reversed list tuple range enumerate zip map bool any all "
  "divmod pow print".split()
)
_STABLE = (ast.Name, ast.Attribute, ast.Subscript, ast.Call)


class Exprs(Seqs, Facts):
  """Expression evaluation. Needs from the lowerer: ``lookup(name, node)``,
  ``getattr_value(obj, attr, node)``, ``call(node)`` and ``facts`` (a dict)."""

  facts: dict

  # ------------------------------------------------------------------------- expressions
  def expr(self, node):
    method = getattr(self, f"expr_{type(node).__name__}", None)
    if method is None:
      raise Refusal(
        f"{type(node).__name__} `{snippet(node)}` is outside the translatable subset", node
      )
    v = method(node)
    if isinstance(v, Undefined):
      if v.what:
        raise Refusal(f"`{snippet(node)}` ({v.what}) is outside the translatable subset", node)
      raise Refusal(f"`{snippet(node)}` is only assigned on some paths (line {v.line})", node)
    if isinstance(node, _STABLE):
      v = self.refine(node, v)
    return v

  def expr_Constant(self, node):
    if isinstance(node.value, bytes | complex) or node.value is Ellipsis:
      raise Refusal(f"literal {snippet(node)} is outside the translatable subset", node)
    return node.value

  def expr_Name(self, node):
    return self.lookup(node.id, node)

  def expr_Attribute(self, node):
    return self.getattr_value(self.expr(node.value), node.attr, node)

  def expr_Tuple(self, node):
    if any(isinstance(e, ast.Starred) for e in node.elts):
      raise Refusal("starred expressions are outside the translatable subset", node)
    return tuple(self.expr(e) for e in node.elts)

  def expr_List(self, node):
    vals = list(self.expr_Tuple(node))
    if self.code is not None and all(int_like(v) for v in vals):
      return self.lst_from(vals, node)
    return tuple(vals)  # constants (class attributes, __init__) stay immutable

  def expr_Dict(self, node):
    out = {}
    for k, v in zip(node.keys, node.values):
      key = self.expr(k) if k is not None else None
      if not is_const(key) or key is None:
        raise Refusal("dict keys must be constants", node)
      out[key] = self.expr(v)
    return out

  def expr_IfExp(self, node):
    test = self.condition(node.test)
    if not isinstance(test, Int):
      return self.expr(node.body if test else node.orelse)
    a = self.guarded(test, node.body, self.derive(node.test, True))
    b = self.guarded(test, node.orelse, self.derive(node.test, False))
    return self.merge(test, a, b, node)

  def merge(self, c, a, b, node):
    """The value of ``a if c else b`` for a run-time condition ``c``."""
    if a is b:
      return a
    if int_like(a) and int_like(b):
      return self.sel(c, a, b, node)
    if isinstance(a, str | Text) and isinstance(b, str | Text):
      if a == b and isinstance(a, str):
        return a
      return Text([Choice(c, Text([a]), Text([b]))])
    if isinstance(a, Lst) and isinstance(b, Lst) and a.length == b.length:
      if isinstance(a.length, int) and (a.reg is not b.reg or a.reg is None):
        ea, eb = self.elems(a, node), self.elems(b, node)
        vals = [self.merge(c, x, y, node) for x, y in zip(ea, eb)]
        return self.lst_from(vals, node, a.mutable and b.mutable)
      if a.reg is b.reg and a.elems is b.elems:
        return a
    if is_const(a) and is_const(b) and type(a) is type(b) and a == b:
      return a
    raise Refusal(
      f"`{snippet(node)}` takes {kind_name(a)} or {kind_name(b)} depending on run-time data",
      node,
    )

  def expr_BinOp(self, node):
    if isinstance(node.op, ast.Div):
      raise Refusal(f"true division `{snippet(node)}` is outside the translatable subset", node)
    a, b = self.expr(node.left), self.expr(node.right)
    for v in (a, b):
      if isinstance(v, float):
        raise Refusal(
          f"float value {v!r} in `{snippet(node)}` is outside the translatable subset", node
        )
    if isinstance(node.op, ast.Add) and (isinstance(a, str | Text) or isinstance(b, str | Text)):
      if not (isinstance(a, str | Text) and isinstance(b, str | Text)):
        raise Refusal(f"`{snippet(node)}` adds text and a non-text value", node)
      return cat(a, b)
    if is_const(a) and is_const(b) and not (int_like(a) and int_like(b)):
      try:
        return self.const_binop(node.op, a, b)
      except TypeError as e:
        raise Refusal(f"`{snippet(node)}`: {e}", node) from None
    if isinstance(node.op, ast.Add) and isinstance(a, Lst | tuple) and isinstance(b, Lst | tuple):
      la, lb = self.lst_from(a, node), self.lst_from(b, node)
      return self.lst_from(self.elems(la, node) + self.elems(lb, node), node)
    if isinstance(node.op, ast.Pow):
      return self.power(a, b, node)
    op = BINOPS.get(type(node.op))
    if op is None:
      raise Refusal(f"operator in `{snippet(node)}` is outside the translatable subset", node)
    return self.arith(op, a, b, node)

  @staticmethod
  def const_binop(op, a, b):
    if isinstance(op, ast.Mod) and isinstance(a, str):
      raise TypeError("%-formatting is outside the translatable subset")
    fn = {ast.Add: lambda: a + b, ast.Mult: lambda: a * b, ast.Sub: lambda: a - b}.get(type(op))
    if fn is None or isinstance(a, str) and isinstance(b, int) and b > 10_000:
      raise TypeError("unsupported operation on constants")
    return fn()

  def power(self, a, b, node):
    self.check_int(a, node)
    if not const_int(b) or not 0 <= int(b) <= 8:
      if const_int(a) and const_int(b):
        return int(a) ** int(b)
      raise Refusal(f"`{snippet(node)}`: only small constant exponents are translatable", node)
    if const_int(a):
      return int(a) ** int(b)
    out = 1
    for _ in range(int(b)):
      out = self.arith("mul", out, a, node)
    return out

  def expr_UnaryOp(self, node):
    if isinstance(node.op, ast.Not):
      return self.not_(self.condition(node.operand), node)
    v = self.expr(node.operand)
    if isinstance(v, float) and isinstance(node.op, ast.USub | ast.UAdd):
      return -v if isinstance(node.op, ast.USub) else v  # a constant (a reward, say)
    if isinstance(node.op, ast.USub):
      return self.unary("neg", v, node)
    if isinstance(node.op, ast.UAdd):
      return self.check_int(v, node)
    if const_int(v):
      return ~int(v)
    raise Refusal(f"bitwise `{snippet(node)}` is outside the translatable subset", node)

  def expr_BoolOp(self, node):
    """``and``/``or`` with Python's value semantics (bools stay bools, ints pick an operand)."""
    is_and = isinstance(node.op, ast.And)
    out, facts = self.expr(node.values[0]), []
    for prev, nxt in zip(node.values, node.values[1:]):
      c = self.truth(out, prev)
      if not isinstance(c, Int) and c != is_and:
        break  # short-circuit on a constant
      facts += self.derive(prev, is_and)
      v = self.guarded(c, nxt, facts)
      if not isinstance(c, Int):
        out = v
      elif all(isinstance(x, Int) and x.boolean or type(x) is bool for x in (out, v)):
        out = (self.and_ if is_and else self.or_)(c, v, node)
      elif int_like(out) and int_like(v):
        out = self.sel(c, v, out, node) if is_and else self.sel(c, out, v, node)
      elif isinstance(out, Answer) and not is_and and isinstance(v, Lst) and v.length == 0:
        out = Lst(None, LGUESS, Int(NGUESS, 0, self.cfg.list_len), -(2**31), 2**31 - 1, False)
      else:
        raise Refusal(f"`{snippet(node)}` mixes {kind_name(out)} and {kind_name(v)}", node)
    return out

  def condition(self, node):
    """The truth value of ``node`` as a condition (constant or 0/1-valued `Int`)."""
    if isinstance(node, ast.BoolOp):
      is_and = isinstance(node.op, ast.And)
      out, facts = self.condition(node.values[0]), []
      for prev, nxt in zip(node.values, node.values[1:]):
        if not isinstance(out, Int) and out != is_and:
          break
        facts += self.derive(prev, is_and)
        c = self.guarded(out, lambda n=nxt: self.condition(n), facts)
        out = (self.and_ if is_and else self.or_)(out, c, node)
      return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
      return self.not_(self.condition(node.operand), node)
    return self.truth(self.expr(node), node)

  def truth(self, v, node):
    if isinstance(v, Int):
      return v
    if isinstance(v, Answer):
      return Int(FOUND, 0, 1, True)
    if isinstance(v, Matches | MatchObj):
      return self.compare("eq", Int(NGUESS, 0, self.cfg.list_len), v.groups, node)
    if isinstance(v, Lst):
      if isinstance(v.length, int):
        return v.length > 0
      return self.compare("ne", v.length, 0, node)
    if isinstance(v, Text):
      if any(isinstance(it, Int | Choice) or isinstance(it, str) and it for it in v.items):
        return True
      raise Refusal(f"truth value of text `{snippet(node)}` is not known", node)
    if isinstance(v, Seed):
      return True
    if isinstance(v, float):
      raise Refusal(
        f"float value {v!r} in `{snippet(node)}` is outside the translatable subset", node
      )
    if is_const(v):
      return bool(v)
    return True

  # ------------------------------------------------------------------------ comparisons
  def expr_Compare(self, node):
    sides = [node.left, *node.comparators]
    out, left = True, self.expr(node.left)
    for op, right_node in zip(node.ops, sides[1:]):
      right = self.expr(right_node)
      out = self.and_(out, self.compare_values(op, left, right, node), node)
      left = right
    return out

  def compare_values(self, op, a, b, node):
    if isinstance(op, ast.Is | ast.IsNot):
      if not (b is None or a is None):
        raise Refusal(f"`is` is only translatable against None: `{snippet(node)}`", node)
      v = b if a is None else a
      if isinstance(v, Answer | MatchObj):
        isnone = self.not_(self.truth(v, node), node)
      elif isinstance(v, Seed):
        isnone = False
      elif is_const(v):
        isnone = v is None
      else:
        isnone = False
      return isnone if isinstance(op, ast.Is) else self.not_(isnone, node)
    if isinstance(op, ast.In | ast.NotIn):
      r = self.contains(b, a, node)
      return r if isinstance(op, ast.In) else self.not_(r, node)
    name = CMPOPS[type(op)]
    if int_like(a) and int_like(b):
      return self.compare(name, a, b, node)
    if name in ("eq", "ne"):
      eq = self.equal(a, b, node)
      return eq if name == "eq" else self.not_(eq, node)
    if is_const(a) and is_const(b) and not isinstance(a, float | Text) and not isinstance(b, float):
      return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[name]
    raise Refusal(f"comparison `{snippet(node)}` of {kind_name(a)} and {kind_name(b)}", node)

  def equal(self, a, b, node):
    if isinstance(b, Answer):
      a, b = b, a
    if isinstance(a, Answer):
      if b is None:
        return self.not_(self.truth(a, node), node)
      if not isinstance(b, Lst | tuple):
        return False
      lst = self.lst_from(b, node) if not isinstance(b, Lst) else b
      if not isinstance(lst.length, int) or lst.length == 0:
        raise Refusal(f"`{snippet(node)}`: compare the answer with a non-empty list", node)
      if lst.length == 1:
        one = self.compare("eq", Int(NGUESS, 0, self.cfg.list_len), 1, node)
        return self.and_(
          one,
          self.compare("eq", self.onehot_get(LGUESS, 0, node), self.elems(lst, node)[0], node),
          node,
        )
      code = self.need_code(node, "an answer")
      return Int(code.scalar("leq", LGUESS, self.list_reg(lst, node)), 0, 1, True)
    if isinstance(a, Lst | tuple) and isinstance(b, Lst | tuple):
      la, lb = self.lst_from(a, node), self.lst_from(b, node)
      if isinstance(la.length, int) and isinstance(lb.length, int):
        if la.length != lb.length:
          return False
        out = True
        for x, y in zip(self.elems(la, node), self.elems(lb, node)):
          out = self.and_(out, self.compare("eq", x, y, node), node)
        return out
      code = self.need_code(node, "a list comparison")
      return Int(code.scalar("leq", self.list_reg(la, node), self.list_reg(lb, node)), 0, 1, True)
    if is_const(a) and is_const(b):
      return a == b
    if int_like(a) and b is None or int_like(b) and a is None:
      return False
    raise Refusal(f"comparison `{snippet(node)}` of {kind_name(a)} and {kind_name(b)}", node)

  def contains(self, container, x, node):
    if is_const(container) and is_const(x) and not isinstance(container, dict):
      return x in container
    self.check_int(x, node)
    if isinstance(container, range | tuple | list) and all(const_int(v) for v in container):
      vals = [int(v) for v in container]
      if len(vals) <= 2:
        out = False
        for v in vals:
          out = self.or_(out, self.compare("eq", x, v, node), node)
        return out
      container = self.lst_from(vals, node)
    lst = self.lst_from(container, node) if not isinstance(container, Lst) else container
    n = self.list_scalar("count", lst, node, [x], 0, self.cfg.list_len)
    return self.compare("gt", n, 0, node)
