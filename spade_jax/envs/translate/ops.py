"""Translator building blocks: ints, conditions, lists and text over abstract values.

`Ops` is the half of the lowering that knows the machine: it turns operations on abstract
values (`values.py`) into instructions with exact Python semantics -- floor ``//``
and ``%``, results range-checked against int32 (a result that may leave int32 is refused),
divisors proven non-zero, conditions as 0/1 registers, lists kept element by element or in a
list register (materialised on demand), text as template items. Everything foldable is
folded at translation time. `lower.Lowerer` (statements, calls, control flow)
builds on it.
"""

from __future__ import annotations

import ast

from spade_jax.envs.translate.ir import TableRef
from spade_jax.envs.translate.values import (
  INT32_MAX,
  INT32_MIN,
  LGUESS,
  Choice,
  Int,
  Lst,
  Refusal,
  Text,
  VReg,
  binary_range,
  bounds,
  const_int,
  fits,
  may_be_zero,
  snippet,
  unary_range,
  union,
)

BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "div", ast.Mod: "mod"}
CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_CMP = {
  "eq": lambda a, b: a == b,
  "ne": lambda a, b: a != b,
  "lt": lambda a, b: a < b,
  "le": lambda a, b: a <= b,
  "gt": lambda a, b: a > b,
  "ge": lambda a, b: a >= b,
}
_FLIP = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def int_like(v) -> bool:
  return isinstance(v, Int) or const_int(v)


class Ops:
  """Machine-level operations; ``self.code`` is the current `ir.Code` (None while
  evaluating ``__init__`` and module constants, where only constants may appear)."""

  code = None
  cfg = None

  # ----------------------------------------------------------------------------- basics
  def need_code(self, node, what: str):
    if self.code is None:
      raise Refusal(f"{what} needs run-time values here (only constants are allowed)", node)
    return self.code

  def opnd(self, v, node):
    """An instruction operand: a register or an int32 immediate."""
    if isinstance(v, Int):
      return v.reg
    if const_int(v):
      v = int(v)
      if not INT32_MIN <= v <= INT32_MAX:
        raise Refusal(f"constant {v} in `{snippet(node)}` does not fit int32", node)
      return v
    raise Refusal(f"`{snippet(node)}` is not an int", node)

  def new_int(self, op, args, lo, hi, node, boolean=False, vals=None) -> Int:
    if not fits(lo, hi):
      raise Refusal(
        f"`{snippet(node)}` may exceed int32 (range [{lo}, {hi}]); values beyond int32 are "
        "outside the translatable subset",
        node,
      )
    code = self.need_code(node, f"`{snippet(node)}`")
    reg = code.scalar(op, *[self.opnd(a, node) for a in args])
    if vals is not None and len(vals) == 1:
      pass  # still a run-time value (e.g. a draw); the set only tightens reasoning
    return Int(reg, lo, hi, boolean, vals)

  def check_int(self, v, node):
    if isinstance(v, float):
      raise Refusal(
        f"float value {v!r} in `{snippet(node)}` is outside the translatable subset", node
      )
    if not int_like(v):
      raise Refusal(f"`{snippet(node)}` is not an int (got {kind_name(v)})", node)
    return v

  # ------------------------------------------------------------------------- arithmetic
  def arith(self, op: str, a, b, node):
    self.check_int(a, node)
    self.check_int(b, node)
    if op in ("div", "mod"):
      if may_be_zero(b):
        raise Refusal(
          f"the divisor in `{snippet(node)}` may be zero (range {bounds(b)[:2]}); prove it "
          "non-zero (e.g. guard with `if d != 0`)",
          node,
        )
    if const_int(a) and const_int(b):
      a, b = int(a), int(b)
      return {"add": a + b, "sub": a - b, "mul": a * b, "div": a // b, "mod": a % b}[op]
    if op == "mul" and (a == 0 or b == 0):
      return 0
    if op in ("mul", "div") and const_int(b) and b == 1 or op == "mul" and const_int(a) and a == 1:
      return a if const_int(b) and b == 1 else b
    if op in ("add", "sub") and const_int(b) and b == 0:
      return a
    if op == "add" and const_int(a) and a == 0:
      return b
    lo, hi, vals = binary_range(op, a, b)
    return self.new_int(op, [a, b], lo, hi, node, vals=vals)

  def unary(self, op: str, a, node):
    self.check_int(a, node)
    if const_int(a):
      return -int(a) if op == "neg" else abs(int(a))
    lo, hi, vals = unary_range(op, a)
    if op == "abs" and a.lo >= 0:
      return a
    return self.new_int(op, [a], lo, hi, node, vals=vals)

  def minmax(self, op: str, a, b, node):
    self.check_int(a, node)
    self.check_int(b, node)
    if const_int(a) and const_int(b):
      return min(int(a), int(b)) if op == "min" else max(int(a), int(b))
    alo, ahi, _ = bounds(a)
    blo, bhi, _ = bounds(b)
    if op == "min" and ahi <= blo or op == "max" and alo >= bhi:
      return a
    if op == "min" and bhi <= alo or op == "max" and blo >= ahi:
      return b
    lo, hi, vals = binary_range(op, a, b)
    return self.new_int(op, [a, b], lo, hi, node, vals=vals)

  def gcd(self, a, b, node):
    import math

    self.check_int(a, node)
    self.check_int(b, node)
    if const_int(a) and const_int(b):
      return math.gcd(int(a), int(b))
    hi = max(unary_range("abs", a)[1], unary_range("abs", b)[1])
    lo = 1 if not may_be_zero(a) or not may_be_zero(b) else 0
    return self.new_int("gcd", [a, b], lo, hi, node)

  def sel(self, c, a, b, node):
    """``a if c else b`` for int values (``c`` a condition)."""
    if not isinstance(c, Int):
      return a if c else b
    self.check_int(a, node)
    self.check_int(b, node)
    if a is b or (const_int(a) and const_int(b) and int(a) == int(b) and type(a) is type(b)):
      return a
    lo, hi, vals = union(a, b)
    boolean = (isinstance(a, Int) and a.boolean or type(a) is bool) and (
      isinstance(b, Int) and b.boolean or type(b) is bool
    )
    return self.new_int("sel", [c, a, b], lo, hi, node, boolean=boolean, vals=vals)

  # ------------------------------------------------------------------------- conditions
  def compare(self, op: str, a, b, node):
    """``a op b`` for ints -> a bool constant or a 0/1 `Int`."""
    self.check_int(a, node)
    self.check_int(b, node)
    if const_int(a) and const_int(b):
      return _PY_CMP[op](int(a), int(b))
    alo, ahi, av = bounds(a)
    blo, bhi, bv = bounds(b)
    decided = {
      "lt": (ahi < blo, alo >= bhi),
      "le": (ahi <= blo, alo > bhi),
      "gt": (alo > bhi, ahi <= blo),
      "ge": (alo >= bhi, ahi < blo),
      "eq": (alo == ahi == blo == bhi, ahi < blo or bhi < alo),
      "ne": (ahi < blo or bhi < alo, alo == ahi == blo == bhi),
    }[op]
    if av is not None and bv is not None and op in ("eq", "ne") and not av & bv:
      decided = (op == "ne", op == "eq")
    if decided[0] or decided[1]:
      return bool(decided[0])
    if const_int(a):  # registers on the left reads better
      a, b, op = b, a, _FLIP[op]
    out = self.new_int(op, [a, b], 0, 1, node, boolean=True)
    out.sym = turn_sym(op, a, b)
    return out

  def not_(self, c, node):
    if not isinstance(c, Int):
      return not c
    if getattr(c, "negation_of", None) is not None:
      return c.negation_of
    out = self.new_int("not", [c], 0, 1, node, boolean=True)
    if c.boolean:
      out.negation_of = c
    if c.sym is not None:
      out.sym = ("not",) + c.sym
    return out

  def and_(self, a, b, node):
    if not isinstance(a, Int):
      return b if a else False
    if not isinstance(b, Int):
      return a if b else False
    return self.new_int("and", [a, b], 0, 1, node, boolean=True)

  def or_(self, a, b, node):
    if not isinstance(a, Int):
      return True if a else b
    if not isinstance(b, Int):
      return True if b else a
    return self.new_int("or", [a, b], 0, 1, node, boolean=True)

  # ------------------------------------------------------------------------------ lists
  def lst_from(self, v, node, mutable=True) -> Lst:
    """A fresh `Lst` from a sequence value (list/tuple/range constant, `Lst`, tuple of ints)."""
    if isinstance(v, Lst):
      return Lst(v.elems and list(v.elems), v.reg, v.length, v.lo, v.hi, mutable)
    if isinstance(v, range | tuple | list):
      items = list(v)
      if len(items) > self.cfg.list_len:
        raise Refusal(
          f"a list of {len(items)} values in `{snippet(node)}` exceeds the interpreter's "
          f"list capacity {self.cfg.list_len}",
          node,
        )
      for x in items:
        self.check_int(x, node)
      lo = min((bounds(x)[0] for x in items), default=0)
      hi = max((bounds(x)[1] for x in items), default=0)
      return Lst(items, None, len(items), lo, hi, mutable)
    raise Refusal(f"`{snippet(node)}` is not a list of ints (got {kind_name(v)})", node)

  def elems(self, lst: Lst, node) -> list:
    """Element values one by one (``get`` from the list register when needed)."""
    if lst.elems is not None:
      return lst.elems
    if not isinstance(lst.length, int):
      raise Refusal(f"`{snippet(node)}` has a run-time length; it cannot be unrolled", node)
    code = self.need_code(node, "a list")
    lst.elems = [Int(code.scalar("get", lst.reg, i), lst.lo, lst.hi) for i in range(lst.length)]
    return lst.elems

  def list_reg(self, lst: Lst, node) -> VReg:
    """The list in a list register (materialised: ``range``, a table copy or pushes)."""
    if lst.reg is not None:
      return lst.reg
    code = self.need_code(node, "a list")
    vals = lst.elems
    if all(const_int(x) for x in vals):
      ints = [int(x) for x in vals]
      if ints and ints == list(range(ints[0], ints[0] + len(ints))):
        lst.reg = code.listop("range", ints[0], ints[0] + len(ints))
      elif ints:
        lst.reg = code.listop("copy", code.tables.ref(ints, node))
      else:
        lst.reg = code.listop("clear")
      return lst.reg
    reg = VReg("l")
    code.emit("clear", reg)
    for x in vals:
      code.emit("push", reg, self.opnd(x, node))
    lst.reg = reg
    return reg

  def list_operand(self, lst: Lst, node):
    """A list operand: its register, or a table for a constant list."""
    if lst.reg is None and lst.elems is not None and all(const_int(x) for x in lst.elems):
      if lst.elems:
        return self.need_code(node, "a list").tables.ref(lst.elems, node)
    return self.list_reg(lst, node)

  def list_result(self, op, args, length, lo, hi, node) -> Lst:
    code = self.need_code(node, f"`{snippet(node)}`")
    return Lst(None, code.listop(op, *args), length, lo, hi)

  def list_scalar(self, op, lst: Lst, node, extra=(), lo=None, hi=None, boolean=False) -> Int:
    args = [self.list_operand(lst, node)] + [self.opnd(x, node) for x in extra]
    code = self.need_code(node, f"`{snippet(node)}`")
    if not fits(lo, hi):
      raise Refusal(f"`{snippet(node)}` may exceed int32 (range [{lo}, {hi}])", node)
    return Int(code.scalar(op, *args), lo, hi, boolean)

  def length(self, lst: Lst):
    return lst.length

  # ------------------------------------------------------------------------------- text
  def to_text(self, v, node) -> Text | str:
    """``str(v)`` as text items."""
    if isinstance(v, Text | str):
      return v
    if isinstance(v, bool):
      return str(v)
    if isinstance(v, Int):
      if v.boolean:
        return Text([Choice(v, Text(["True"]), Text(["False"]))])
      return Text([v])
    if const_int(v):
      return str(int(v))
    if isinstance(v, Lst):
      return cat("[", cat(Text([v]), "]"))
    if isinstance(v, tuple | list) and all(const_int(x) for x in v) or v is None:
      return str(v)
    raise Refusal(f"`{snippet(node)}` ({kind_name(v)}) cannot be rendered as text", node)

  def table(self, values, node) -> TableRef:
    return self.need_code(node, "a constant list").tables.ref(values, node)

  def onehot_get(self, src: VReg, k: int, node) -> Int:
    """Element ``k`` of a run-time-length list without an index fault: ``dot`` with a one-hot
    table (0 when the list is shorter, which the caller has ruled out)."""
    code = self.need_code(node, "an answer")
    if k == 0 and src is LGUESS:
      from spade_jax.envs.translate.values import GUESS

      return Int(GUESS, INT32_MIN, INT32_MAX)
    t = code.tables.ref([0] * k + [1], node)
    return Int(code.scalar("dot", src, t), INT32_MIN, INT32_MAX)


def max_len(lst: Lst, cfg) -> int:
  """A list's length, or the capacity when it is only known at run time."""
  return lst.length if isinstance(lst.length, int) else cfg.list_len


def cat(a, b):
  """Concatenation of two texts (str or `Text`)."""
  items = (a.items if isinstance(a, Text) else [a]) + (b.items if isinstance(b, Text) else [b])
  out = []
  for it in items:
    if isinstance(it, str) and out and isinstance(out[-1], str):
      out[-1] += it
    elif not (isinstance(it, str) and not it):
      out.append(it)
  if all(isinstance(it, str) for it in out):
    return "".join(out)
  return Text(out)


def turn_sym(op, a, b):
  """``("turn>=", M)``-style tags for comparisons of the turn counter with a constant."""
  from spade_jax.envs.translate.values import TURN

  if isinstance(a, Int) and a.reg is TURN and const_int(b):
    c = int(b)
    return {
      "ge": ("turn>=", c),
      "gt": ("turn>=", c + 1),
      "eq": ("turn==", c),
      "lt": ("turn<", c),
      "le": ("turn<", c + 1),
      "ne": ("turn!=", c),
    }[op]
  return None


def kind_name(v) -> str:
  if isinstance(v, float):
    return "a float"
  if isinstance(v, str):
    return "a string"
  if isinstance(v, Text):
    return "run-time text"
  if v is None:
    return "None"
  if isinstance(v, Int):
    return "a run-time int"
  if isinstance(v, Lst):
    return "a run-time list"
  name = type(v).__name__
  return {"Bound": "a function", "ActionText": "the action text", "Module": "a module"}.get(
    name, name
  )
