"""Translator: calls -- builtins, ``random``, ``re``, ``math``, list and string methods, and the
environment's own functions and methods (inlined by the visitor)."""

from __future__ import annotations

import ast
import builtins as py_builtins

from spade_jax.envs.translate import texts as tx
from spade_jax.envs.translate.answers import BOX
from spade_jax.envs.translate.coerce import kind_name
from spade_jax.envs.translate.kinds import (
  ActionText,
  AnswerInts,
  BoxedIntsParser,
  Builtin,
  ConstDict,
  Digits,
  Func,
  Group,
  Int,
  It,
  ListLit,
  Lst,
  Match,
  Method,
  Milli,
  Pattern,
  Range,
  Rng,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.stdlib import module_call, random_call, re_call
from spade_jax.envs.translate.texts import Slot, Text

_IDENTITY_STR = frozenset({"strip", "lower", "upper", "lstrip", "rstrip"})


def call(v, node):
  """``v`` is the `visitor.Visitor`."""
  fn = v.expr(node.func)
  if any(isinstance(a, ast.Starred) for a in node.args) or any(
    k.arg is None for k in node.keywords
  ):
    raise Refusal(f"`{snippet(node)}`: * or ** arguments", node)
  if isinstance(fn, Builtin) and fn.name in ("sum", "min", "max", "any", "all", "list", "sorted"):
    if len(node.args) == 1 and isinstance(node.args[0], ast.GeneratorExp | ast.ListComp):
      if fn.name in ("sum", "min", "max", "any", "all") and not node.keywords:
        return v.reduce_comprehension(node.args[0], fn.name)
      seq = v.comprehension(node.args[0])
      return _builtin(v, fn.name, [seq], {}, node)
  if (
    isinstance(fn, Method) and isinstance(fn.obj, str) and fn.name == "join" and len(node.args) == 1
  ):
    return _join(v, fn.obj, node)
  args = [v.expr(a) for a in node.args]
  kwargs = {k.arg: v.expr(k.value) for k in node.keywords}
  if isinstance(fn, Builtin):
    return _builtin(v, fn.name, args, kwargs, node)
  if isinstance(fn, Func):
    return v.inline(fn.node, args, dict(kwargs), node, fn.bound)
  if isinstance(fn, BoxedIntsParser):
    if len(args) != 1 or not isinstance(args[0], ActionText):
      raise Refusal(f"`{snippet(node)}`: the answer parser only parses the step's action", node)
    v.env.use_grammar(0, True, node)
    return AnswerInts()
  if isinstance(fn, Method):
    return _method(v, fn, args, kwargs, node)
  if isinstance(fn, tuple) and fn and fn[0] == "module-fn":
    return module_call(v, fn[1], fn[2], args, kwargs, node)
  raise Refusal(f"call `{snippet(node)}` is outside the translatable subset", node)


# ------------------------------------------------------------------------------- builtins
def _builtin(v, name, args, kwargs, node):
  e = v.e
  args = [v.read_var(a) for a in args]
  args = [a.keys if isinstance(a, ConstDict) and name != "len" else a for a in args]
  if kwargs and name not in ("sorted", "max", "min", "round"):
    raise Refusal(f"`{snippet(node)}`: keyword arguments", node)
  if all(is_const(a) for a in args) and name in (
    "abs", "min", "max", "int", "str", "len", "sum", "sorted", "divmod", "pow", "bool", "tuple",
    "list", "float", "round", "any", "all",
  ) and not kwargs:  # fmt: skip
    py = {"list": ListLit, "sorted": lambda x: ListLit(sorted(x))}.get(name) or getattr(
      py_builtins, name
    )
    try:
      return py(*args)
    except Exception as ex:  # noqa: BLE001
      raise Refusal(f"`{snippet(node)}` raises {type(ex).__name__}", node) from None
  if name == "range" and 1 <= len(args) <= 3:
    return v.make_range(args, node)
  if args and isinstance(args[0], Range) and name in ("list", "tuple", "sorted", "len", "sum"):
    rg = args[0]
    if name == "len":
      return v.length_of(It(("range", rg.lo, rg.hi, rg.step)))
    if rg.step != 1:
      raise Refusal(f"`{snippet(node)}`: {name} of a stepped range", node)
    r = e.temp_list()
    e.emit("range", r, v.operand(rg.lo, node), v.operand(rg.hi, node))
    n = len(range(rg.lo, rg.hi)) if isinstance(rg.lo, int) and isinstance(rg.hi, int) else None
    args = [Lst(r, n)] + args[1:]
    if name in ("list", "tuple", "sorted"):
      return args[0]
  if name == "abs" and len(args) == 1:
    if isinstance(args[0], Milli):
      r = e.temp()
      e.emit("abs", r, args[0].reg)
      return Milli(r)
    r = e.temp()
    e.emit("abs", r, v.operand(v.as_int(args[0], node), node))
    return Int(r)
  if name in ("min", "max"):
    if kwargs:
      raise Refusal(f"`{snippet(node)}`: {name} with a key", node)
    if len(args) == 1:
      if isinstance(args[0], tuple):
        return v.minmax(name, list(args[0]))
      lst = v.as_list(args[0], node)
      r = e.temp()
      e.emit("l" + name, r, lst.reg)
      return Int(r)
    return v.minmax(name, args)
  if name == "int" and len(args) == 1:
    a = args[0]
    if isinstance(a, Group):
      v.env.use_grammar(a.grammar, a.last, node)
      if a.grammar == BOX:  # int() of a box's content: ValueError unless it holds an int
        v.raise_unless("nguess", "ValueError", node)
        return Int("guess")
      if a.grammar == 0:
        r = e.temp()
        e.emit("get", r, "lguess", a.index)
        return Int(r)
      return Int("guess")
    if isinstance(a, Digits):
      return a.value
    if isinstance(a, Int):
      return Int(a.reg)
    if isinstance(a, Milli):
      r = e.temp()
      e.emit("div", r, a.reg, 1000)  # floor; int() truncates toward zero
      t = e.temp()
      e.emit("mod", t, a.reg, 1000)
      s = e.temp()
      e.emit("lt", s, a.reg, 0)
      e.emit("and", s, s, t)
      e.emit("add", r, r, s)
      return Int(r)
    raise Refusal(f"`{snippet(node)}`: int() of {kind_name(a)}", node)
  if name == "float" and len(args) == 1:
    if isinstance(args[0], Milli):
      return args[0]
    return Milli(v.milli_operand(args[0], node))
  if name == "bool" and len(args) == 1:
    c = v.truth(args[0], node)
    if isinstance(c, bool):
      return c
    r = e.temp()
    e.emit("ne", r, c, 0)
    return Int(r, True)
  if name == "str" and len(args) == 1:
    a = args[0]
    if isinstance(a, Int) and not a.boolean:
      reg = v.slot_copy(a.reg)
      return Text.of(Slot(reg))
    return v.as_text(a, node)
  if name == "len" and len(args) == 1:
    a = args[0]
    if isinstance(a, Text) and len(a.alts) == 1 and len(a.alts[0]) == 1:
      slot = a.alts[0][0]
      if isinstance(slot, Slot) and not slot.is_list:
        d = _digits(v, slot.name, node)
        r = e.temp()
        e.emit("len", r, d)
        return Int(r)
    lst = v.as_list(a, node)
    r = e.temp()
    e.emit("len", r, lst.reg)
    return Int(r)
  if name == "sum" and len(args) in (1, 2):
    lst = v.as_list(args[0], node)
    r = e.temp()
    e.emit("sum", r, lst.reg)
    out = Int(r)
    return v.binop(ast.Add, out, args[1], node) if len(args) == 2 else out
  if name in ("any", "all") and len(args) == 1:
    lst = v.as_list(args[0], node)
    r = e.temp()
    if name == "any":
      n = e.temp()
      e.emit("len", n, lst.reg)
      e.emit("count", r, lst.reg, 0)
      e.emit("lt", r, r, n)
    else:
      e.emit("count", r, lst.reg, 0)
      e.emit("eq", r, r, 0)
    return Int(r, True)
  if name == "sorted":
    rev = kwargs.pop("reverse", False)
    if kwargs or len(args) != 1:
      raise Refusal(f"`{snippet(node)}`: sorted with a key", node)
    lst = v.as_list(args[0], node)
    r = e.temp_list()
    e.emit("sort", r, lst.reg)
    out = Lst(r, lst.length)
    if rev is True:
      e.emit("rev", r, r)
    elif rev is not False:
      raise Refusal(f"`{snippet(node)}`: reverse chosen at run time", node)
    return out
  if name in ("list", "tuple") and len(args) == 1:
    a = args[0]
    if isinstance(a, Lst):
      r = e.temp_list()
      e.emit("copy", r, a.reg)
      return Lst(r, a.length)
    raise Refusal(f"`{snippet(node)}`: list() of this value", node)
  if name == "divmod" and len(args) == 2:
    return (v.binop(ast.FloorDiv, args[0], args[1], node), v.binop(ast.Mod, args[0], args[1], node))
  if name == "pow" and len(args) in (2, 3):
    return v.power(args[0], args[1], args[2] if len(args) == 3 else None, node)
  if name == "round" and len(args) == 1 and isinstance(args[0], Int):
    return args[0]
  if name == "print":
    return None
  if name == "isinstance":
    raise Refusal(f"`{snippet(node)}`: isinstance", node)
  raise Refusal(f"call `{snippet(node)}` is outside the translatable subset", node)


def _digits(v, reg, node) -> str:
  r = v.e.temp_list()
  v.e.emit("digits", r, reg)
  return r


# -------------------------------------------------------------------------------- methods
def _method(v, m: Method, args, kwargs, node):
  e = v.e
  obj = v.read_var(m.obj)
  if isinstance(obj, Rng):
    return random_call(v, m.name, args, kwargs, node)
  if isinstance(obj, Pattern):
    return re_call(v, m.name, [obj.text, *args], node)
  if isinstance(obj, Match) and m.name == "groups" and not args and obj.groups > 1:
    v.env.use_grammar(0, True, node)
    return tuple(Group(0, True, i) for i in range(obj.groups))
  if isinstance(obj, Match) and m.name == "group" and not obj.many:
    if (
      obj.groups > 1 and len(args) == 1 and isinstance(args[0], int) and 1 <= args[0] <= obj.groups
    ):
      v.env.use_grammar(0, True, node)
      return Group(0, True, args[0] - 1)
    if args not in ([1], [0]) or obj.groups > 1:
      raise Refusal(f"`{snippet(node)}`: only group(1) of a match", node)
    return Group(obj.grammar, False)
  if isinstance(obj, ConstDict) and m.name == "get" and len(args) in (1, 2):
    return v.dict_get(obj, args[0], node, args[1] if len(args) == 2 else None, True)
  if isinstance(obj, ActionText) and m.name in _IDENTITY_STR:
    return obj
  if isinstance(obj, Group) and m.name in ("strip", "lstrip", "rstrip") and not args:
    return obj
  if isinstance(obj, Group) and obj.grammar == BOX and m.name == "isdigit" and not args:
    v.env.use_grammar(BOX, obj.last, node)  # an int without a sign (approximately: "+5")
    r = e.temp()
    e.emit("ge", r, "guess", 0)
    e.emit("and", r, r, "nguess")
    return Int(r, True)
  if isinstance(obj, str) and all(is_const(a) for a in args) and not kwargs:
    if m.name == "join" and len(args) == 1:
      return obj.join(args[0])
    try:
      return getattr(obj, m.name)(*args)
    except Exception as ex:  # noqa: BLE001
      raise Refusal(f"`{snippet(node)}` raises {type(ex).__name__}", node) from None
  if isinstance(obj, str) and m.name == "join" and len(args) == 1:
    return _join(v, obj, node)
  if isinstance(obj, Text) and m.name in ("strip",) and obj.constant is None:
    return obj
  if isinstance(obj, Text) and obj.constant is not None and all(is_const(a) for a in args):
    return getattr(obj.constant, m.name)(*args)
  if isinstance(obj, Lst):
    lst = obj.reg
    if m.name == "append" and len(args) == 1:
      e.emit("push", lst, v.operand(v.as_int(args[0], node), node))
      return None
    if m.name == "extend" and len(args) == 1:
      v.extend(lst, v.as_list(args[0], node), node)
      return None
    if m.name in ("count", "index") and len(args) == 1:
      r = e.temp()
      e.emit(
        "count" if m.name == "count" else "find", r, lst, v.operand(v.as_int(args[0], node), node)
      )
      return Int(r)
    if m.name == "sort" and not args:
      rev = kwargs.pop("reverse", False)
      e.emit("sort", lst, lst)
      if rev is True:
        e.emit("rev", lst, lst)
      return None
    if m.name == "reverse" and not args:
      e.emit("rev", lst, lst)
      return None
    if m.name == "clear" and not args:
      e.emit("clear", lst)
      return None
    if m.name == "copy" and not args:
      r = e.temp_list()
      e.emit("copy", r, lst)
      return Lst(r)
    if m.name == "pop" and len(args) <= 1:
      return _pop(v, lst, args[0] if args else -1, node)
    if m.name == "insert" and len(args) == 2:
      _insert(v, lst, args[0], args[1], node)
      return None
    if m.name == "remove" and len(args) == 1:
      i = e.temp()
      e.emit("find", i, lst, v.operand(v.as_int(args[0], node), node))
      _pop(v, lst, Int(i), node)
      return None
  raise Refusal(f"call `{snippet(node)}` is outside the translatable subset", node)


def _pop(v, lst, idx, node):
  """``lst.pop(idx)``: the value, then the tail shifted left by one."""
  e = v.e
  n = e.temp()
  e.emit("len", n, lst)
  i = e.local()
  e.emit("set", i, v.operand(v.as_int(idx, node), node))
  t = e.temp()
  e.emit("lt", t, i, 0)
  s = e.temp()
  e.emit("add", s, i, n)
  e.emit("sel", i, t, s, i)
  out = e.local()
  e.emit("get", out, lst, i)  # faults like IndexError when out of range
  last = e.temp()
  e.emit("sub", last, n, 1)

  def shift(j):
    x = e.temp()
    e.emit("add", x, j, 1)
    e.emit("get", x, lst, x)
    e.emit("lset", lst, j, x)

  v.count_loop(i, last, shift)
  e.emit("take", lst, lst, last)
  return Int(out)


def _insert(v, lst, idx, value, node):
  e = v.e
  n = e.temp()
  e.emit("len", n, lst)
  i = v.clamp_index(idx, n, node)
  x = e.local()
  e.emit("set", x, v.operand(v.as_int(value, node), node))
  e.emit("push", lst, 0)
  j = e.local()
  e.emit("set", j, n)
  top, end = e.new_label(), e.new_label()
  t = e.temp()
  e.place(top)
  e.emit("gt", t, j, i)
  e.emit("jz", t, end)
  e.emit("sub", t, j, 1)
  e.emit("get", t, lst, t)
  e.emit("lset", lst, j, t)
  e.emit("sub", j, j, 1)
  e.emit("jmp", top)
  e.place(end)
  e.emit("lset", lst, i, x)


def _join(v, sep: str, node):
  """``sep.join(...)``: ", " of a run-time int list is one list slot; constant parts fold."""
  arg = node.args[0]
  inner = None
  if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "map":
    if len(arg.args) == 2 and isinstance(arg.args[0], ast.Name) and arg.args[0].id == "str":
      inner = v.expr(arg.args[1])
  elif isinstance(arg, ast.GeneratorExp | ast.ListComp) and len(arg.generators) == 1:
    g, elt = arg.generators[0], arg.elt
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
      inner = v.expr(g.iter)
  if inner is not None:
    inner = v.read_var(inner)
    if isinstance(inner, tuple):
      return (
        sep.join(str(x) for x in inner) if is_const(inner) else _join_values(v, sep, inner, node)
      )
    lst = v.as_list(inner, node)
    if sep == ", ":
      r = v.e.local_list()
      v.e.emit("copy", r, lst.reg)
      return Text.of(Slot(r))
    if lst.length is not None:  # a list of known length: one slot per element
      items = []
      for k in range(lst.length):
        r = v.e.local()
        v.e.emit("get", r, lst.reg, k)
        items.append(Int(r))
      return _join_values(v, sep, items, node)
    raise Refusal(
      f"`{snippet(node)}`: join of a run-time list of unknown length with {sep!r}", node
    )
  val = v.read_var(v.expr(arg))
  if isinstance(val, tuple):
    return _join_values(v, sep, val, node)
  raise Refusal(f"`{snippet(node)}`: join of this value", node)


def _join_values(v, sep, vals, node):
  out = Text.of("")
  for i, x in enumerate(vals):
    if i:
      out = tx.concat(out, Text.of(sep), v.e, node)
    out = tx.concat(out, v.as_text(x, node), v.e, node)
  return out


# --------------------------------------------------------------------------------- random
# ------------------------------------------------------------------------------------ re
