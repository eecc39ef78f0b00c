"""Translator: expressions -- names, attributes, literals, f-strings, arithmetic (int and
thousandths), comparisons, boolean operators, conditional expressions, subscripts. Functions of
the `visitor.Visitor` (bound there as its methods)."""

from __future__ import annotations

import ast

from spade_jax.envs.translate import texts as tx
from spade_jax.envs.translate.call import call
from spade_jax.envs.translate.kinds import (
  Builtin,
  ConstDict,
  Digits,
  Group,
  Info,
  Int,
  ListLit,
  Lst,
  Match,
  Method,
  Milli,
  Module,
  Pattern,
  Range,
  Rng,
  SelfRef,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.texts import Text

_ARITH = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "div", ast.Mod: "mod"}
_BUILTINS = frozenset(
  "abs min max int str len sum sorted reversed range enumerate zip list float bool divmod pow "
  "round any all isinstance print tuple".split()
)


# --------------------------------------------------------------------------- expressions
def shadowed(self, name: str) -> bool:
  return any(name in f.names for f in self.frames[-1:]) or name in self.env.globals


def lookup(self, name: str, node=None):
  f = self.frame
  if name in f.names:
    return self.read_var(f.names[name])
  if name in self.env.globals:
    return self.env.globals[name]
  if name in _BUILTINS:
    return Builtin(name)
  if name in ("True", "False", "None"):
    return {"True": True, "False": False, "None": None}[name]
  raise Refusal(f"name `{name}` is not defined here (or not translatable)", node)


def expr(self, node):
  meth = getattr(self, "expr_" + type(node).__name__, None)
  if meth is None:
    raise Refusal(f"`{snippet(node)}` ({type(node).__name__}) is outside the subset", node)
  return meth(node)


def expr_Constant(self, node):
  return node.value


def expr_Name(self, node):
  return self.lookup(node.id, node)


def expr_Tuple(self, node):
  return tuple(self.expr(x) for x in node.elts)


def expr_Dict(self, node):
  if not node.keys:
    return Info()
  if any(k is None for k in node.keys):
    raise Refusal(f"`{snippet(node)}`: ** in a dict display", node)
  keys = tuple(self.read_var(self.expr(k)) for k in node.keys)
  if not all(isinstance(k, int | str) for k in keys):
    raise Refusal(f"`{snippet(node)}`: dict keys must be constants", node)
  return ConstDict(keys, tuple(self.read_var(self.expr(v)) for v in node.values))


def expr_List(self, node):
  vals = [self.read_var(self.expr(x)) for x in node.elts]
  if all(isinstance(v, int | str | float) for v in vals):
    return ListLit(vals)  # materialised when stored (`store`) or mutated
  r = self.e.temp_list()
  self.e.emit("clear", r)
  for v in vals:
    self.e.emit("push", r, self.operand(self.as_int(v, node), node))
  return Lst(r)


def expr_Attribute(self, node):
  base = self.expr(node.value)
  if isinstance(base, SelfRef):
    return self.env.read_attr(node.attr, node, self)
  if isinstance(base, Module):
    return self.env.module_attr(base.name, node.attr, node)
  if isinstance(base, Rng):
    return Method(base, node.attr, None)
  if isinstance(base, Pattern):
    return Method(base, node.attr, None)
  return Method(base, node.attr, node.value)


def expr_JoinedStr(self, node):
  out = Text.of("")
  for part in node.values:
    if isinstance(part, ast.Constant):
      out = tx.concat(out, Text.of(part.value), self.e, node)
      continue
    if part.format_spec is not None:
      spec = self.expr(part.format_spec)
      v = self.expr(part.value)
      if is_const(v) and isinstance(spec, Text) and spec.constant is not None:
        out = tx.concat(out, Text.of(format(v, spec.constant)), self.e, node)
        continue
      raise Refusal(f"`{snippet(part)}`: format specs on run-time values", part)
    v = self.expr(part.value)
    if part.conversion not in (-1, ord("s")) and not is_const(v):
      raise Refusal(f"`{snippet(part)}`: conversion on a run-time value", part)
    if part.conversion == ord("r") and is_const(v):
      v = repr(v)
    out = tx.concat(out, self.as_text(v, part), self.e, node)
  return out


def expr_UnaryOp(self, node):
  v = self.expr(node.operand)
  if isinstance(node.op, ast.Not):
    c = self.truth(v, node)
    if isinstance(c, bool):
      return not c
    r = self.e.temp()
    self.e.emit("not", r, c)
    return Int(r, True)
  if isinstance(node.op, ast.USub):
    if is_const(v):
      return -v
    if isinstance(v, Milli):
      r = self.e.temp()
      self.e.emit("neg", r, v.reg)
      return Milli(r)
    r = self.e.temp()
    self.e.emit("neg", r, self.as_int(v, node).reg)
    return Int(r)
  if isinstance(node.op, ast.UAdd):
    return v
  raise Refusal(f"`{snippet(node)}`: operator outside the subset", node)


def expr_BinOp(self, node):
  return self.binop(type(node.op), self.expr(node.left), self.expr(node.right), node)


def binop(self, op, a, b, node):
  a, b = self.read_var(a), self.read_var(b)
  if isinstance(a, Digits):
    a = a.value
  if isinstance(b, Digits):
    b = b.value
  if is_const(a) and is_const(b):
    try:
      return PY_OPS[op](a, b)
    except Exception as ex:  # noqa: BLE001 - refusing is the answer
      raise Refusal(f"`{snippet(node)}` raises {type(ex).__name__}", node) from None
  if op is ast.Add and (isinstance(a, str | Text) or isinstance(b, str | Text)):
    return tx.concat(self.as_text(a, node), self.as_text(b, node), self.e, node)
  if op is ast.Add and isinstance(a, Lst | tuple) and isinstance(b, Lst | tuple):
    r = self.e.temp_list()
    self.e.emit("copy", r, self.as_list(a, node).reg)
    self.extend(r, self.as_list(b, node), node)
    return Lst(r)
  if op is ast.Mult and (isinstance(a, Lst | ListLit) or isinstance(b, Lst | ListLit)):
    return self.repeat(a, b, node)
  if op is ast.Pow:
    return self.power(a, b, None, node)
  if isinstance(a, float | Milli) or isinstance(b, float | Milli) or op is ast.Div:
    return self.milli_op(op, a, b, node)
  if op not in _ARITH:
    raise Refusal(f"`{snippet(node)}`: operator outside the subset", node)
  x, y = self.as_int(a, node), self.as_int(b, node)
  r = self.e.temp()
  self.e.emit(_ARITH[op], r, self.operand(x, node), self.operand(y, node))
  return Int(r)


def repeat(self, a, b, node):
  """``xs * n`` (either order) for a run-time count: a loop of pushes."""
  lst, n = (a, b) if isinstance(a, Lst | ListLit) else (b, a)
  src = self.as_list(lst, node)
  r = self.e.local_list()
  self.e.emit("clear", r)
  count = self.operand(self.as_int(n, node), node)
  self.count_loop(0, count, lambda i: self.extend(r, src, node))
  static = src.length is not None and isinstance(count, int)
  return Lst(r, src.length * max(count, 0) if static else None)


def milli_op(self, op, a, b, node):
  if op in (ast.Add, ast.Sub):
    r = self.e.temp()
    self.e.emit(_ARITH[op], r, self.milli_operand(a, node), self.milli_operand(b, node))
    return Milli(r)
  if op is ast.Mult:
    if isinstance(a, float | Milli) and isinstance(b, float | Milli):
      raise Refusal(f"`{snippet(node)}`: product of two floats", node)
      # (thousandths times thousandths would need a rounding rule Python does not have)
    m, k = (a, b) if isinstance(a, float | Milli) else (b, a)
    r = self.e.temp()
    self.e.emit("mul", r, self.milli_operand(m, node), self.operand(self.as_int(k, node), node))
    return Milli(r)
  raise Refusal(f"`{snippet(node)}`: float division or another float operator", node)


def power(self, base, exp, mod, node):
  if isinstance(exp, int) and exp >= 0 and mod is None and exp <= 8:
    out = 1
    for _ in range(exp):
      out = self.binop(ast.Mult, out, base, node)
    return out
  # square and multiply, as a loop
  b, x = self.e.local(), self.e.local()
  r = self.e.local()
  self.e.emit("set", r, 1)
  self.e.emit("set", b, self.operand(self.as_int(base, node), node))
  self.e.emit("set", x, self.operand(self.as_int(exp, node), node))
  m = None if mod is None else self.operand(self.as_int(mod, node), node)
  if m is not None:
    self.e.emit("mod", b, b, m)
  top, end, skip = self.e.new_label(), self.e.new_label(), self.e.new_label()
  t = self.e.temp()
  self.e.place(top)
  self.e.emit("gt", t, x, 0)
  self.e.emit("jz", t, end)
  self.e.emit("mod", t, x, 2)
  self.e.emit("jz", t, skip)
  self.e.emit("mul", r, r, b)
  if m is not None:
    self.e.emit("mod", r, r, m)
  self.e.place(skip)
  self.e.emit("div", x, x, 2)
  self.e.emit("jz", x, end)
  self.e.emit("mul", b, b, b)
  if m is not None:
    self.e.emit("mod", b, b, m)
  self.e.emit("jmp", top)
  self.e.place(end)
  return Int(r)


def expr_BoolOp(self, node):
  is_and = isinstance(node.op, ast.And)
  vals = [self.read_var(self.expr(v)) for v in node.values]
  if (
    not is_and
    and len(vals) == 2
    and isinstance(vals[0], Lst)
    and isinstance(vals[1], tuple)
    and not vals[1]
  ):
    return Lst(vals[0].reg)  # `xs or []`: an empty list is falsy and the same as []
  if all(is_const(v) for v in vals):
    out = vals[0]
    for v in vals[1:]:
      out = (out and v) if is_and else (out or v)
    return out
  acc = None
  for v, sub in zip(vals, node.values, strict=True):
    c = self.truth(v, sub)
    if isinstance(c, bool):
      if c is (not is_and):
        return c  # True in an `or` / False in an `and` decides
      continue
    if acc is None:
      acc = c
    else:
      r = self.e.temp()
      self.e.emit("and" if is_and else "or", r, acc, c)
      acc = r
  if acc is None:
    return is_and
  return Int(acc, True)


def group_digits(self, g: Group, node) -> Lst:
  """The characters of a matched group of a non-negative grammar, as its digits (``\\d{3}``
  has no leading zeros in range; others lose them: approximate)."""
  if g.grammar not in (2, 4):
    raise Refusal(f"`{snippet(node)}`: characters of a signed answer", node)
  self.env.use_grammar(g.grammar, g.last, node)
  r = self.e.temp_list()
  self.e.emit("digits", r, "guess")
  return Lst(r)


def expr_Subscript(self, node):
  base = self.expr(node.value)
  if isinstance(node.slice, ast.Slice):
    return self.slice(base, node.slice, node)
  idx = self.expr(node.slice)
  if isinstance(base, ConstDict):
    return self.dict_get(base, idx, node)
  if isinstance(base, Group):
    base = self.group_digits(base, node)
  if isinstance(base, Match) and base.many:
    if idx in (0, -1):
      if base.groups > 1:
        self.env.use_grammar(0, True, node)
        return tuple(Group(0, True, i) for i in range(base.groups))
      return Group(base.grammar, idx == -1)
    raise Refusal(f"`{snippet(node)}`: only the first or last match", node)
  if isinstance(base, tuple) and isinstance(idx, int):
    return base[idx]
  if isinstance(base, str) and isinstance(idx, int):
    return base[idx]
  if isinstance(base, tuple):
    if all(isinstance(x, int) and not isinstance(x, bool) for x in base):
      return self.const_get(base, self.as_int(idx, node), node)
    if all(isinstance(x, str) for x in base):
      i = self.as_int(idx, node)
      sel = self.e.temp()
      # Python's negative indexes: i % n for i in [-n, n)
      self.e.emit("mod", sel, i.reg, len(base))
      return Text([(x,) if x else () for x in base], sel)
    raise Refusal(f"`{snippet(node)}`: run-time index into a mixed tuple", node)
  lst = self.as_list(base, node)
  r = self.e.temp()
  self.e.emit("get", r, lst.reg, self.operand(self.as_int(idx, node), node))
  return Int(r)


# --------------------------------------------------------------------------------- calls
def make_range(self, args, node):
  """``range(...)``: a constant tuple when short, else a `Range`."""
  args = [self.read_var(a) for a in args]
  if len(args) == 1:
    args = [0, args[0]]
  step = args[2] if len(args) == 3 else 1
  if not isinstance(step, int) or step == 0:
    raise Refusal(f"`{snippet(node)}`: range step must be a non-zero constant", node)
  lo, hi = args[0], args[1]
  if isinstance(lo, int) and isinstance(hi, int) and len(range(lo, hi, step)) <= 4:
    return tuple(range(lo, hi, step))
  return Range(self.as_int(lo, node), self.as_int(hi, node), step)


def expr_Call(self, node):

  return call(self, node)


PY_OPS = {
  ast.Add: lambda a, b: a + b,
  ast.Sub: lambda a, b: a - b,
  ast.Mult: lambda a, b: a * b,
  ast.FloorDiv: lambda a, b: a // b,
  ast.Mod: lambda a, b: a % b,
  ast.Pow: lambda a, b: a**b,
  ast.Div: lambda a, b: a / b,
  ast.BitAnd: lambda a, b: a & b,
  ast.BitOr: lambda a, b: a | b,
}
