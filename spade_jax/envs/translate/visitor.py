"""Translator: the one lowering visitor (statements and expressions -> IR code with jumps).

`Visitor` walks a method's AST once, computing a typed value (`kinds`, `texts`) for every
expression and emitting code through an `emit.Emitter`. Compile-time values fold; run-time
values live in registers. Control flow is real: ``if`` is a conditional jump, loops (``for``
over ranges, lists and constant tuples, ``while``) are backward jumps the interpreter bounds by
its fuel, ``break``/``continue``/``return`` jump to their labels, helpers and methods are
inlined at each call (their ``return``s jump to the call's end). Draws run where Python runs
them, so the draw tape stays aligned under any condition. Arithmetic is checked int32 at run
time: a value Python keeps and int32 cannot is a run-time fault the differential check sees.
"""

from __future__ import annotations

import ast
import math

from spade_jax.envs.translate import texts as tx
from spade_jax.envs.translate.answers import grammar_of
from spade_jax.envs.translate.kinds import (
  ActionText,
  Builtin,
  Digits,
  Func,
  Group,
  Info,
  Int,
  Lst,
  Match,
  Method,
  Milli,
  Module,
  Pattern,
  Range,
  Rng,
  SelfRef,
  Var,
  is_const,
)
from spade_jax.envs.translate.texts import Slot, Text, TextVar
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
MAX_INLINE_DEPTH = 8
MAX_UNROLL = 16


class It(tuple):
  """An iteration the visitor lowers as a loop: ("range", lo, hi, step), ("list", reg),
  ("table", t, n), ("digits", reg), ("enumerate", It), ("zip", It, It)."""


class Frame:
  """One inlined call: its names, its return slot and labels."""

  def __init__(self, fn_name: str, end: str):
    self.fn_name = fn_name
    self.names: dict[str, object] = {}
    self.end = end
    self.result = None  # a Var (or nested tuple of Vars) once the first return is seen
    self.direct = None  # the value of a single trailing return
    self.loops: list[tuple[str, str]] = []  # (continue label, break label)
    self.multi: set[str] = set()  # names assigned more than once or in a loop


def _assigned_names(body) -> tuple[set[str], set[str]]:
  """(names assigned exactly once outside loops, names assigned otherwise)."""
  counts: dict[str, int] = {}
  multi: set[str] = set()

  def targets(t, in_loop):
    if isinstance(t, ast.Name):
      counts[t.id] = counts.get(t.id, 0) + 1
      if in_loop:
        multi.add(t.id)
    elif isinstance(t, ast.Tuple | ast.List):
      for x in t.elts:
        targets(x, in_loop)

  def walk(stmts, in_loop, in_branch):
    for s in stmts:
      if isinstance(s, ast.Assign):
        for t in s.targets:
          targets(t, in_loop)
          if in_branch and isinstance(t, ast.Name):
            multi.add(t.id)
      elif isinstance(s, ast.AugAssign | ast.AnnAssign):
        targets(s.target, in_loop)
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
          multi.add(s.target.id)
      elif isinstance(s, ast.For):
        targets(s.target, True)
        walk(s.body, True, in_branch)
        walk(s.orelse, in_loop, in_branch)
      elif isinstance(s, ast.While):
        walk(s.body, True, in_branch)
        walk(s.orelse, in_loop, in_branch)
      elif isinstance(s, ast.If):
        walk(s.body, in_loop, True)
        walk(s.orelse, in_loop, True)
      elif isinstance(s, ast.Try):
        walk(s.body, in_loop, True)
        for h in s.handlers:
          walk(h.body, in_loop, True)
      elif isinstance(s, ast.With):
        walk(s.body, in_loop, in_branch)
    return counts

  walk(body, False, False)
  multi |= {n for n, c in counts.items() if c > 1}
  return set(counts) - multi, multi


class Visitor:
  """Lowers method bodies. ``env`` is the `lowering.EnvLowering` that owns the attributes,
  module names, the answer grammar and the emitter."""

  def __init__(self, env):
    self.env = env
    self.e = env.e
    self.frames: list[Frame] = []

  @property
  def frame(self) -> Frame:
    return self.frames[-1]

  # ------------------------------------------------------------------------------- calls
  def inline(self, fdef: ast.FunctionDef, args: list, kwargs: dict, node, bound: bool):
    """Runs ``fdef``'s body with the given argument values; returns its value."""
    if len(self.frames) >= MAX_INLINE_DEPTH + 1:
      raise Refusal(f"calls nested deeper than {MAX_INLINE_DEPTH} (recursion?)", node)
    if fdef.decorator_list:
      raise Refusal(f"function {fdef.name} has decorators", fdef)
    frame = Frame(fdef.name, self.e.new_label())
    once, multi = _assigned_names(fdef.body)
    frame.multi = multi
    a = fdef.args
    if a.vararg or a.kwonlyargs or a.posonlyargs:
      raise Refusal(f"function {fdef.name}: only plain parameters are translated", fdef)
    params = [p.arg for p in a.args]
    if bound:
      params = params[1:]
    defaults = [None] * (len(params) - len(a.defaults)) + list(a.defaults)
    if len(args) > len(params):
      raise Refusal(f"`{snippet(node)}`: too many arguments", node)
    bind = {}
    for i, p in enumerate(params):
      if i < len(args):
        bind[p] = args[i]
      elif p in kwargs:
        bind[p] = kwargs.pop(p)
      elif defaults[i] is not None:
        bind[p] = self.const_default(defaults[i])
      else:
        raise Refusal(f"`{snippet(node)}`: missing argument {p}", node)
    if kwargs and not a.kwarg:
      raise Refusal(f"`{snippet(node)}`: unknown keyword {sorted(kwargs)[0]}", node)
    if bound:
      frame.names[a.args[0].arg] = SelfRef()
    self.frames.append(frame)
    try:
      for p, v in bind.items():
        if p in multi or p in once:  # the body assigns it: a fresh copy
          self.assign_name(p, v, fdef)
        else:
          frame.names[p] = v
      body = fdef.body
      last = body[-1] if body else None
      n_returns = sum(isinstance(n, ast.Return) for n in ast.walk(fdef))
      if n_returns == 1 and isinstance(last, ast.Return):
        self.block(body[:-1])
        frame.direct = self.expr(last.value) if last.value is not None else None
      else:
        self.block(body)
      self.e.place(frame.end)
    finally:
      self.frames.pop()
    if frame.direct is not None or frame.result is None:
      return frame.direct
    return self.read_var(frame.result)

  def const_default(self, node):
    v = self.env.const_expr(node)
    if not is_const(v):
      raise Refusal(f"default `{snippet(node)}` is not a constant", node)
    return v

  # --------------------------------------------------------------------------- statements
  def block(self, stmts) -> None:
    for s in stmts:
      with self.e.statement():
        self.stmt(s)

  def stmt(self, s) -> None:
    meth = getattr(self, "stmt_" + type(s).__name__, None)
    if meth is None:
      raise Refusal(f"`{snippet(s)}` ({type(s).__name__}) is outside the translatable subset", s)
    meth(s)

  def stmt_Pass(self, s):
    pass

  def stmt_Expr(self, s):
    if isinstance(s.value, ast.Constant):  # docstring
      return
    self.expr(s.value)

  def stmt_Assign(self, s):
    value = self.expr(s.value)
    for t in s.targets:
      self.store(t, value, s)

  def stmt_AnnAssign(self, s):
    if s.value is not None:
      self.store(s.target, self.expr(s.value), s)

  def stmt_AugAssign(self, s):
    op = type(s.op)
    load = _as_load(s.target)
    value = self.binop(op, self.expr(load), self.expr(s.value), s)
    self.store(s.target, value, s)

  def stmt_If(self, s):
    c = self.cond(s.test)
    if isinstance(c, bool):
      self.block(s.body if c else s.orelse)
      return
    other, end = self.e.new_label(), self.e.new_label()
    self.e.emit("jz", c, other if s.orelse else end)
    self.block(s.body)
    if s.orelse:
      self.e.emit("jmp", end)
      self.e.place(other)
      self.block(s.orelse)
    self.e.place(end)

  def stmt_While(self, s):
    if s.orelse:
      raise Refusal("`while ... else` is outside the translatable subset", s)
    top, end = self.e.new_label(), self.e.new_label()
    self.e.place(top)
    with self.e.statement():
      c = self.cond(s.test)
      if c is False:
        self.e.emit("jmp", end)
      elif c is not True:
        self.e.emit("jz", c, end)
    self.frame.loops.append((top, end))
    self.block(s.body)
    self.frame.loops.pop()
    self.e.emit("jmp", top)
    self.e.place(end)

  def stmt_Break(self, s):
    if not self.frame.loops:
      raise Refusal("`break` outside a loop", s)
    self.e.emit("jmp", self.frame.loops[-1][1])

  def stmt_Continue(self, s):
    if not self.frame.loops:
      raise Refusal("`continue` outside a loop", s)
    self.e.emit("jmp", self.frame.loops[-1][0])

  def stmt_Return(self, s):
    value = self.expr(s.value) if s.value is not None else None
    f = self.frame
    if f.result is None:
      f.result = self.new_var(value, s)
    self.write_var(f.result, value, s)
    self.e.emit("jmp", f.end)

  def stmt_For(self, s):
    if s.orelse:
      raise Refusal("`for ... else` is outside the translatable subset", s)
    self.loop(s.target, s.iter, lambda: self.block(s.body), s)

  # ------------------------------------------------------------------------------- loops
  def loop(self, target, iter_node, body, node) -> None:
    """``for target in iter_node: body()`` as an IR loop (short constant tuples unroll)."""
    it = self.iterable(iter_node)
    if not isinstance(it, It):
      if len(it) > MAX_UNROLL and all(isinstance(x, int) for x in it):
        it = It(("table", self.e.table(it, node), len(it)))
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
    else:  # ("list", reg) | ("table", name, n) | ("zip"/"enumerate", ...)
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
    """A constant tuple, or ("range", lo, hi, step) / ("list", reg) / ("table", t, n) /
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
        return It(("table", self.e.table(it, node), len(it)))
      raise Refusal(f"`{snippet(node)}`: zip of a run-time list with non-int constants", node)
    if it[0] in ("list", "table", "digits"):
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
    if kind == "table":
      return it[2]
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
    if kind in ("list", "table"):
      r = self.e.local()
      self.e.emit("get", r, it[1], i)
      return Int(r)
    if kind == "digits":
      r = self.e.local()
      self.e.emit("get", r, it[1], i)
      return Digits(Int(r))
    if kind == "enumerate":
      return (Int(i), self.item_at(it[1], i, node))
    if kind == "zip":
      return (self.item_at(it[1], i, node), self.item_at(it[2], i, node))
    raise AssertionError(kind)

  # ------------------------------------------------------------------------------ storing
  def store(self, target, value, node) -> None:
    if isinstance(target, ast.Name):
      self.assign_name(target.id, value, node)
    elif isinstance(target, ast.Tuple | ast.List):
      if isinstance(value, Var) and value.kind == "tuple":
        value = self.read_var(value)
      if not isinstance(value, tuple) or len(value) != len(target.elts):
        raise Refusal(f"`{snippet(node)}`: cannot unpack this value", node)
      # evaluate all first (a, b = b, a): copy run-time ints
      vals = [self.snapshot(v) for v in value]
      for t, v in zip(target.elts, vals, strict=True):
        self.store(t, v, node)
    elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
      if target.value.id != "self" or self.lookup("self") != SelfRef():
        raise Refusal(f"`{snippet(target)}`: only attributes of self are assigned", node)
      self.env.assign_attr(target.attr, value, node, self)
    elif isinstance(target, ast.Subscript):
      seq = self.expr(target.value)
      lst = self.as_list(seq, target)
      idx = self.as_int(self.expr(target.slice), target)
      self.e.emit("lset", lst.reg, self.operand(idx, target), self.operand(self.as_int(value, node), node))
    else:
      raise Refusal(f"`{snippet(node)}`: assignment target outside the subset", node)

  def snapshot(self, v):
    if isinstance(v, Int) and not self.e.is_temp(v.reg) and v.reg[0] == "r":
      r = self.e.temp()
      self.e.emit("set", r, v.reg)
      return Int(r, v.boolean)
    if isinstance(v, Milli) and not self.e.is_temp(v.reg):
      r = self.e.temp()
      self.e.emit("set", r, v.reg)
      return Milli(r)
    return v

  def assign_name(self, name: str, value, node) -> None:
    f = self.frame
    cur = f.names.get(name)
    if isinstance(cur, Var):
      self.write_var(cur, value, node)
      return
    if name not in f.multi:
      f.names[name] = self.bind_once(value)
      return
    var = self.new_var(value, node)
    f.names[name] = var
    self.write_var(var, value, node)

  def bind_once(self, value):
    """A name assigned once keeps the value itself (pinned; ints copied when they may change)."""
    if isinstance(value, Int | Milli):
      if self.e.is_temp(value.reg):
        self.e.pin(value.reg)
        return value
      if value.reg[0] != "r":
        return value  # a special (guess, found ...): constant within the call
      r = self.e.local()
      self.e.emit("set", r, value.reg)
      return type(value)(r, value.boolean) if isinstance(value, Int) else Milli(r)
    if isinstance(value, Lst):
      if self.e.is_temp(value.reg):
        self.e.pin(value.reg)
      return value
    if isinstance(value, Text):
      for s in value.slots():
        if self.e.is_temp(s.name):
          self.e.pin(s.name)
      if isinstance(value.sel, str) and self.e.is_temp(value.sel):
        self.e.pin(value.sel)
      return value
    if isinstance(value, tuple):
      return tuple(self.bind_once(v) for v in value)
    return value

  def new_var(self, value, node, home: bool = False):
    """A slot shaped like ``value`` (a tuple of slots for a tuple)."""
    e = self.e
    reg = e.regs.home if home else e.local
    if isinstance(value, Var):
      value = self.read_var(value)
    if isinstance(value, bool) or (isinstance(value, Int) and value.boolean):
      return Var("int", reg(), boolean=True)
    if isinstance(value, int | Int):
      return Var("int", reg())
    if isinstance(value, float | Milli):
      return Var("milli", reg())
    if isinstance(value, Lst):
      return Var("list", e.lists.home() if home else e.local_list())
    if isinstance(value, str | Text):
      return Var("text", TextVar(reg()))
    if isinstance(value, tuple) and not is_const(value):
      return Var("tuple", tuple(self.new_var(v, node, home) for v in value))
    if is_const(value) or isinstance(value, Info):
      return Var("const", value)
    raise Refusal(f"`{snippet(node)}`: a {type(value).__name__} cannot be kept in a variable", node)

  def write_var(self, var: Var, value, node, home: bool = False) -> None:
    e = self.e
    if isinstance(value, Var):
      value = self.read_var(value)
    if var.kind == "int":
      if isinstance(value, float | Milli):
        raise Refusal(f"`{snippet(node)}`: a variable holds an int and a float", node)
      e.emit("set", var.ref, self.operand(self.as_int(value, node), node))
    elif var.kind == "milli":
      e.emit("set", var.ref, self.milli_operand(value, node))
    elif var.kind == "list":
      lst = self.as_list(value, node)
      if lst.reg != var.ref:
        e.emit("copy", var.ref, lst.reg)
    elif var.kind == "text":
      t = self.as_text(value, node)
      if home:
        t = self.env.home_text(t)
      var.ref.assign(t, e)
    elif var.kind == "tuple":
      if not isinstance(value, tuple) or len(value) != len(var.ref):
        raise Refusal(f"`{snippet(node)}`: returns tuples of different shapes", node)
      for sub, v in zip(var.ref, value, strict=True):
        self.write_var(sub, v, node, home)
    elif var.kind == "const":
      if not (value == var.ref or (isinstance(value, Info) and isinstance(var.ref, Info))):
        raise Refusal(f"`{snippet(node)}`: a variable holds values of different kinds", node)
    else:
      raise AssertionError(var.kind)

  def read_var(self, var):
    if not isinstance(var, Var):
      return var
    if var.kind == "int":
      return Int(var.ref, var.boolean)
    if var.kind == "milli":
      return Milli(var.ref)
    if var.kind == "list":
      return Lst(var.ref)
    if var.kind == "text":
      return var.ref.value()
    if var.kind == "tuple":
      return tuple(self.read_var(v) for v in var.ref)
    return var.ref

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
    raise Refusal(f"`{snippet(node)}`: dicts are outside the subset", node)

  def expr_List(self, node):
    vals = [self.expr(x) for x in node.elts]
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
        return _PY_OPS[op](a, b)
      except Exception as ex:  # noqa: BLE001 - refusing is the answer
        raise Refusal(f"`{snippet(node)}` raises {type(ex).__name__}", node) from None
    if op is ast.Add and (isinstance(a, str | Text) or isinstance(b, str | Text)):
      return tx.concat(self.as_text(a, node), self.as_text(b, node), self.e, node)
    if op is ast.Add and isinstance(a, Lst | tuple) and isinstance(b, Lst | tuple):
      r = self.e.temp_list()
      self.e.emit("copy", r, self.as_list(a, node).reg)
      self.extend(r, self.as_list(b, node), node)
      return Lst(r)
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
    vals = [self.expr(v) for v in node.values]
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
      if isinstance(a, Match):
        c = self.match_found(a, node)
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
    a, b = self.expr(node.body), self.expr(node.orelse)
    return self.select(c, a, b, node)

  def select(self, c, a, b, node):
    a, b = self.read_var(a), self.read_var(b)
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
    if isinstance(base, Match) and base.many:
      if idx in (0, -1):
        return Group(base.grammar, idx == -1)
      raise Refusal(f"`{snippet(node)}`: only the first or last match", node)
    if isinstance(base, tuple) and isinstance(idx, int):
      return base[idx]
    if isinstance(base, str) and isinstance(idx, int):
      return base[idx]
    if isinstance(base, tuple):
      if all(isinstance(x, int) and not isinstance(x, bool) for x in base):
        r = self.e.temp()
        self.e.emit("get", r, self.e.table(base, node), self.operand(self.as_int(idx, node), node))
        return Int(r)
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
      self.e.emit("take", r, lst.reg, self.operand(self.as_int(hi, node), node) if hi is not None else 2**31 - 1)
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
    if isinstance(v, Digits):
      raise Refusal(f"`{snippet(node)}`: a digit character used as a number (use int())", node)
    if isinstance(v, bool):
      return int(v)
    if isinstance(v, int):
      return v
    if isinstance(v, Int):
      return v
    raise Refusal(f"`{snippet(node)}`: expected an int, got {_kind(v)}", node)

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
    raise Refusal(f"`{snippet(node)}`: expected a number, got {_kind(v)}", node)

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
      return Lst(r)
    if isinstance(v, tuple):
      r = self.e.temp_list()
      self.e.emit("clear", r)
      for x in v:
        self.e.emit("push", r, self.operand(self.as_int(x, node), node))
      return Lst(r)
    raise Refusal(f"`{snippet(node)}`: expected a list of ints, got {_kind(v)}", node)

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
    raise Refusal(f"`{snippet(node)}`: {_kind(v)} shown as text", node)

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
    return "found"

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
    from spade_jax.envs.translate.call import call

    return call(self, node)


_PY_OPS = {
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


def _as_load(t):
  t2 = ast.parse(ast.unparse(t), mode="eval").body
  return ast.copy_location(t2, t)


def _kind(v) -> str:
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


__all__ = ["Visitor", "Frame", "math", "grammar_of"]
