"""Translator: expressions -- names, attributes, literals, f-strings, arithmetic (int and
thousandths), comparisons, boolean operators, conditional expressions, subscripts. Functions of
the `visitor.Visitor` (bound there as its methods)."""

from __future__ import annotations

import ast

from spade_jax.envs.translate import texts as tx
from spade_jax.envs.translate.call import call
from spade_jax.envs.translate.kinds import (
  AnswerInts,
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
from spade_jax.envs.translate.texts import Text
from spade_jax.envs.translate.values import Refusal, snippet

_ARITH = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "div", ast.Mod: "mod"}
_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_CMP = {
  "eq": lambda a, b: a == b,
  "ne": lambda a, b: a != b,
  "lt": lambda a, b: a < b,
  "le": lambda a, b: a <= b,
  "gt": lambda a, b: a > b,
  "ge": lambda a, b: a >= b,
}
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
    self.e.emit("eq", r, tx.selector(a, self.e), i)
    acc = r if acc is False else self._or(acc, r)
  if name == "ne":
    return self.negate(acc) if acc is not False else True
  return acc


def _or(self, a, b):
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
        acc = c if acc is False else self._or(acc, c)
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
  if not (_pure(node.body) and _pure(node.orelse)):
    return self.branch_value(c, node.body, node.orelse, node)
  a, b = self.expr(node.body), self.expr(node.orelse)
  return self.select(c, a, b, node)


def _pure(node) -> bool:
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


def group_digits(self, g: Group, node) -> Lst:
  """The characters of a matched group of a non-negative grammar, as its digits (``\\d{3}``
  has no leading zeros in range; others lose them: approximate)."""
  if g.grammar not in (2, 4):
    raise Refusal(f"`{snippet(node)}`: characters of a signed answer", node)
  self.env.use_grammar(g.grammar, g.last, node)
  r = self.e.temp_list()
  self.e.emit("digits", r, "guess")
  return Lst(r)


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
