"""Translator: *facts* -- what a guard such as ``if ints is None: return`` or
``1 <= x <= self.k`` proves about the code it protects.

Facts make guarded code exact without branches: a refined value is computed so that it equals
the original wherever the guard holds and is harmless elsewhere (``min``/``max`` clamps for
ranges, ``x if x else 1`` for a non-zero divisor). Straight-line code runs on every path, so
an operation that could fault (divide by zero, overflow) must be safe on paths Python never
takes too; clamping gives exactly that. Facts about a name are dropped when it is reassigned.
"""

from __future__ import annotations

import ast
import re

from spade_jax.envs.translate.ops import CMPOPS, Ops, int_like
from spade_jax.envs.translate.values import Int, Refusal, bounds, may_be_zero, snippet


def fact_key(node) -> str | None:
  """A key for expressions whose value facts can refine: names, ``self.x``, constant
  subscripts of those, and ``int(...)`` of them."""
  n = node
  if isinstance(n, ast.Call):
    if not (isinstance(n.func, ast.Name) and n.func.id == "int" and len(n.args) == 1):
      return None
    n = n.args[0]
  while isinstance(n, ast.Subscript | ast.Attribute):
    if isinstance(n, ast.Subscript) and not isinstance(n.slice, ast.Constant):
      return None
    n = n.value
  return ast.unparse(node) if isinstance(n, ast.Name) else None


class Facts(Ops):
  """Fact tables (``self.facts``: key -> [(kind, payload)]) and the values they refine."""

  facts: dict

  # ------------------------------------------------------------------------------ facts
  def derive(self, node, positive: bool) -> list:
    """Facts (key, kind, payload) that hold where ``node`` is true (or false)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
      return self.derive(node.operand, not positive)
    if isinstance(node, ast.BoolOp):
      if isinstance(node.op, ast.And) == positive:
        return [f for v in node.values for f in self.derive(v, positive)]
      return []
    key = fact_key(node)
    if key is not None:
      return [(key, "truthy", None)] if positive else []
    if not isinstance(node, ast.Compare):
      return []
    ops, sides = node.ops, [node.left, *node.comparators]
    if len(ops) == 1 and isinstance(ops[0], ast.Is | ast.IsNot):
      key = fact_key(sides[0])
      is_none = isinstance(sides[1], ast.Constant) and sides[1].value is None
      if key and is_none and (isinstance(ops[0], ast.IsNot) == positive):
        return [(key, "truthy", None)]
      return []
    if len(ops) > 1 and not positive:
      return []
    out = []
    for op, a, b in zip(ops, sides, sides[1:]):
      name = CMPOPS.get(type(op))
      if name is None:
        return []
      if not positive:
        name = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}[name]
      flip = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[name]
      if (
        isinstance(a, ast.Call)
        and isinstance(a.func, ast.Name)
        and a.func.id == "len"
        and len(a.args) == 1
        and isinstance(b, ast.Constant)
        and type(b.value) is int
        and name == "eq"
      ):
        key = fact_key(a.args[0])
        if key:
          out += [(key, "truthy", None), (key, "len", b.value)]
        continue
      for x, y, o in ((a, b, name), (b, a, flip)):
        key = fact_key(x)
        if key and o != "ne":
          out.append((key, "bound", (o, y)))
        elif key and isinstance(y, ast.Constant) and y.value == 0:
          out.append((key, "nonzero", None))
    return out

  def with_facts(self, facts: list) -> dict:
    """Adds facts; returns the previous table (to restore)."""
    saved = self.facts
    if facts:
      self.facts = {k: list(v) for k, v in saved.items()}
      for key, kind, payload in facts:
        self.facts.setdefault(key, []).append((kind, payload))
    return saved

  def forget(self, name: str) -> None:
    """Drops facts about a name that is being reassigned."""
    pat = re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)")
    if any(pat.search(k) for k in self.facts):
      self.facts = {k: v for k, v in self.facts.items() if not pat.search(k)}

  def has_fact(self, node, kind: str):
    key = fact_key(node)
    for k, payload in self.facts.get(key, []) if key else []:
      if k == kind:
        return payload if payload is not None else True
    return None

  def refine(self, node, v):
    """Applies range / non-zero facts about ``node`` to its value ``v``."""
    key = fact_key(node)
    if key is None or key not in self.facts or not isinstance(v, Int):
      return v
    if key in self._refining:
      return v
    self._refining.add(key)
    try:
      for kind, payload in self.facts[key]:
        if kind == "nonzero" and may_be_zero(v):
          out = self.new_int("sel", [v, v, 1], min(v.lo, 1), max(v.hi, 1), node)
          out.nonzero, out.boolean = True, v.boolean
          v = out
        elif kind == "bound":
          v = self._bound(v, payload, node)
    finally:
      self._refining.discard(key)
    return v

  def _bound(self, v, payload, node):
    """``v`` clamped by the fact ``v <op> other`` when that narrows its range."""
    op, other = payload
    try:
      b = self.expr(other)
      if not int_like(b):
        return v
      blo, bhi, _ = bounds(b)
      if op == "eq":
        return b if (blo, bhi) != (v.lo, v.hi) and bhi - blo < v.hi - v.lo else v
      if op in ("le", "lt") and bhi - (op == "lt") < v.hi:
        b = self.arith("sub", b, 1, other) if op == "lt" else b
        return self.minmax("min", v, b, node)
      if op in ("ge", "gt") and blo + (op == "gt") > v.lo:
        b = self.arith("add", b, 1, other) if op == "gt" else b
        return self.minmax("max", v, b, node)
    except Refusal:
      pass
    return v

  def require(self, node, kind: str, what: str):
    if not self.has_fact(node, kind):
      raise Refusal(
        f"`{snippet(node)}` may be None or empty here ({what}); guard it first, e.g. "
        "`if x is None: return ...`",
        node,
      )

  def guarded(self, test, node, facts=()):
    """Evaluates ``node`` as Python does only when ``test`` holds: draws and mutations in it
    are refused (the guard is non-None), facts of the test apply."""
    saved_cond, saved_facts = self.cond, self.with_facts(list(facts))
    if isinstance(test, Int) and self.cond is None:
      self.cond = test
    try:
      return self.expr(node) if not callable(node) else node()
    finally:
      self.cond, self.facts = saved_cond, saved_facts
