"""Translator: storing values -- names, attributes, unpacking, list element stores -- and the
variables that hold run-time values assigned on several paths (`kinds.Var`). Functions of the
`visitor.Visitor` (bound there as its methods)."""

from __future__ import annotations

import ast

from spade_jax.envs.translate.kinds import (
  Digits,
  Info,
  Int,
  ListLit,
  Lst,
  MaybeInt,
  Milli,
  SelfRef,
  Var,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.texts import Text, TextVar


def outcomes(done, trunc) -> tuple[int, ...]:
  """The step outcomes (0 go, 1 terminated, 2 truncated) a (done, truncated) pair allows
  (each a compile-time bool / int or a run-time value)."""
  const = lambda x: isinstance(x, bool | int) and not isinstance(x, Int)
  ds = (1,) if const(done) and done else (0,) if const(done) else (0, 1)
  ts = (1,) if const(trunc) and trunc else (0,) if const(trunc) else (0, 1)
  return tuple(sorted({1 if d else (2 if t else 0) for d in ds for t in ts}))


# ------------------------------------------------------------------------------ storing
def rebind(self, target, value, node) -> None:
  """An unrolled loop's target: a name assigned nowhere else takes each item as it is (a
  constant index stays a constant)."""
  if isinstance(target, ast.Name) and self.frame.sites.get(target.id) == 1:
    self.frame.names[target.id] = self.bind_once(self.read_var(value))
  elif (
    isinstance(target, ast.Tuple) and isinstance(value, tuple) and len(value) == len(target.elts)
  ):
    for t, v in zip(target.elts, value, strict=True):
      self.rebind(t, v, node)
  else:
    self.store(target, value, node)


def store(self, target, value, node) -> None:
  if isinstance(value, ListLit) and not isinstance(target, ast.Tuple | ast.List):
    value = self.as_list(value, node)
  if isinstance(target, ast.Name):
    self.assign_name(target.id, value, node)
  elif isinstance(target, ast.Tuple | ast.List):
    if isinstance(value, Var) and value.kind == "tuple":
      value = self.read_var(value)
    value = self.read_var(value)
    if isinstance(value, Lst) and value.length == len(target.elts):
      items = []
      for k in range(value.length):
        r = self.e.temp()
        self.e.emit("get", r, value.reg, k)
        items.append(Int(r))
      value = tuple(items)
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
    self.e.emit(
      "lset", lst.reg, self.operand(idx, target), self.operand(self.as_int(value, node), node)
    )
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
    value = self.read_var(value)
    if isinstance(value, Lst) and name in f.resized:
      value = Lst(value.reg, None)
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
  if isinstance(value, Digits):
    value = value.value
  if isinstance(value, bool) or (isinstance(value, Int) and value.boolean):
    return Var("int", reg(), boolean=True)
  if isinstance(value, int | Int):
    return Var("int", reg())
  if isinstance(value, float | Milli):
    return Var("milli", reg())
  if isinstance(value, Lst):
    return Var("list", e.lists.home() if home else e.local_list())
  if isinstance(value, str | Text):
    return Var("text", TextVar(reg(), tuple(self.regions), home))
  if isinstance(value, tuple) and not is_const(value):
    return Var("tuple", tuple(self.new_var(v, node, home) for v in value))
  if is_const(value) or isinstance(value, Info):
    return Var("const", value)
  raise Refusal(f"`{snippet(node)}`: a {type(value).__name__} cannot be kept in a variable", node)


def write_var(self, var: Var, value, node, home: bool = False) -> None:
  e = self.e
  if isinstance(value, Var):
    value = self.read_var(value)
  if isinstance(value, Digits):
    value = value.value
  if var.kind == "maybe":
    reg, present = var.ref
    if value is None:
      e.emit("set", present, 0)
      e.emit("set", reg, 0)
    elif isinstance(value, MaybeInt):
      e.emit("set", present, value.present)
      e.emit("set", reg, value.reg)
    else:
      e.emit("set", reg, self.operand(self.as_int(value, node), node))
      e.emit("set", present, 1)
    return
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
    common = 0
    while common < min(len(var.ref.chain), len(self.regions)) and (
      var.ref.chain[common] == self.regions[common]
    ):
      common += 1
    if any(r < 0 for r in self.regions[common:]) or (
      var.ref.home and any(r < 0 for r in self.regions)
    ):
      raise Refusal(f"`{snippet(node)}`: a text assigned again in a run-time loop", node)
    if home:
      t = self.env.home_text(t)
    var.ref.assign(t, e, tuple(self.regions))
  elif var.kind == "tuple":
    if not isinstance(value, tuple) or len(value) != len(var.ref):
      raise Refusal(f"`{snippet(node)}`: returns tuples of different shapes", node)
    fb = var.ref[0].ref if len(value) >= 4 and var.ref[0].kind == "text" else None
    first = len(fb.alts) if fb is not None else 0
    for sub, v in zip(var.ref, value, strict=True):
      self.write_var(sub, v, node, home)
    if fb is not None:
      fb.outcomes.append((first, len(fb.alts), outcomes(value[2], value[3])))
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
    return Lst(var.ref, var.length)
  if var.kind == "maybe":
    return MaybeInt(*var.ref)
  if var.kind == "text":
    return var.ref.value()
  if var.kind == "tuple":
    return tuple(self.read_var(v) for v in var.ref)
  return var.ref
