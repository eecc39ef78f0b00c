"""Translator: calls -- builtins, ``random`` draws, answer parsing with ``re``, list and string
methods, and the ``sum(...)`` idioms that map onto single list instructions.

Draws. ``randint``/``randrange`` lower to ``rand`` (the drawn value), ``choice`` to ``choice``
over a table or list (or ``rand`` of the index for a constant range), ``sample`` and
``shuffle`` to the list ops: exactly the draw format of `draws.py`, so values recorded from
CPython's ``random`` replay into the interpreter. A draw must run on every path (never under a
run-time condition or after an early return), so Python and the interpreter draw the same
sequence. Seeds may only come from ``reset``'s seed argument: a constant seed would make every
Python episode identical while the interpreter's vary.

Answers. ``_boxed_ints(action)`` (the library twins' parser, recognised by its exact source)
is the device parser itself. ``re.findall``/``re.search`` of a ``\\boxed{}`` pattern with
``g`` int groups (``(-?\\d+)``, commas and optional ``\\s*``) is mapped to "the device parser
found exactly ``g`` ints"; these agree on well-formed answers but not on every text (see
`pipeline.APPROXIMATE_PARSE`), which the differential check then exercises.
"""

from __future__ import annotations

import ast
import re

from spade_jax.envs.translate.expr import BUILTINS
from spade_jax.envs.translate.ops import int_like, max_len
from spade_jax.envs.translate.values import (
  INT32_MAX,
  INT32_MIN,
  LGUESS,
  NGUESS,
  ActionText,
  Answer,
  Bound,
  Builtin,
  Function,
  Int,
  Lst,
  Matches,
  MatchObj,
  MatchStr,
  Module,
  Pattern,
  Refusal,
  Rng,
  Seed,
  VReg,
  bounds,
  const_int,
  is_const,
  snippet,
)

_WS = r"(?:\\s\*|\\s\?| \*| \?)?"
_INTG = r"\((?:-\?|\\-\?|\[-\]\?)(?:\\d\+|\[0-9\]\+)\)"
_ANSWER_RE = re.compile(
  r"\\\\boxed\\?\{" + _WS + _INTG + "(?:" + _WS + "," + _WS + _INTG + ")*" + _WS + r"\\?\}"
)
STRING_CONSTANTS = frozenset(
  "ascii_letters ascii_lowercase ascii_uppercase digits hexdigits octdigits punctuation".split()
)
_STR_METHODS = frozenset(
  "upper lower capitalize title strip lstrip rstrip replace startswith endswith center ljust "
  "rjust zfill count find split format".split()
)
MUTATORS = frozenset({"append", "extend", "sort", "reverse", "pop", "insert", "remove", "clear"})


def answer_groups(text: str) -> int | None:
  """Number of int groups of a recognised ``\\boxed{}`` answer pattern, else None."""
  if not isinstance(text, str) or not _ANSWER_RE.fullmatch(text):
    return None
  return len(re.findall(_INTG, text))


class Calls:
  """Call evaluation (mixed into the lowerer)."""

  def expr_Call(self, node):
    return self.call(node)

  def call(self, node):
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
      k.arg is None for k in node.keywords
    ):
      raise Refusal(f"`*args`/`**kwargs` in `{snippet(node)}`", node)
    f = node.func
    if isinstance(f, ast.Name) and f.id == "sum" and self.lookup("sum", f) == Builtin("sum"):
      return self.call_sum(node)
    if isinstance(f, ast.Attribute) and f.attr == "join":
      base = self.expr(f.value)
      if isinstance(base, str):
        return self.call_join(base, node)
    fn = self.expr(f)
    if isinstance(fn, Function):
      return self.inline(fn, node)
    args = [self.expr(a) for a in node.args]
    kw = {k.arg: self.expr(k.value) for k in node.keywords}
    if isinstance(fn, Builtin):
      return self.builtin(fn.name, args, kw, node)
    if isinstance(fn, Bound):
      return self.method(fn.obj, fn.name, args, kw, node)
    raise Refusal(f"call `{snippet(node)}` is outside the translatable subset", node)

  # ----------------------------------------------------------------------------- builtins
  def builtin(self, name, args, kw, node):
    if name not in BUILTINS:
      raise Refusal(f"{name}() is outside the translatable subset", node)
    allowed_kw = {"sorted": {"reverse"}, "enumerate": {"start"}, "print": {"sep", "end"}}
    if set(kw) - allowed_kw.get(name, set()):
      raise Refusal(f"keyword arguments {sorted(kw)} of {name}() are outside the subset", node)
    one = args[0] if args else None
    if name == "print":
      return None
    if name == "int" and len(args) == 1:
      if isinstance(one, Int):
        return Int(one.reg, one.lo, one.hi, False, one.vals, one.sym, one.nonzero)
      if isinstance(one, MatchStr):
        return self.onehot_get(LGUESS, one.k, node)
      if isinstance(one, bool | int) or isinstance(one, str) and re.fullmatch(r"\s*-?\d+\s*", one):
        return int(one)
    elif name == "str" and len(args) == 1:
      return self.to_text(one, node)
    elif name == "len" and len(args) == 1:
      return self.length_of(one, node)
    elif name == "abs" and len(args) == 1:
      return self.unary("abs", one, node)
    elif name in ("min", "max") and args:
      return self.min_max(name, args, node)
    elif name == "sorted" and len(args) == 1:
      return self.sort(one, kw.get("reverse", False), node)
    elif name == "reversed" and len(args) == 1:
      return self.sort(one, None, node)
    elif name in ("list", "tuple") and len(args) <= 1:
      if not args:
        return self.lst_from([], node)
      if self.code is None or isinstance(one, tuple) and not all(int_like(v) for v in one):
        return tuple(self.iterate(one, node.args[0]))  # constants stay immutable
      return self.lst_from(one, node, mutable=name == "list")
    elif name == "range" and 1 <= len(args) <= 3:
      if not all(const_int(a) for a in args):
        raise Refusal(
          f"`{snippet(node)}`: range() with run-time bounds cannot be unrolled (only constant "
          "ranges are translatable)",
          node,
        )
      return range(*[int(a) for a in args])
    elif name == "enumerate" and len(args) in (1, 2):
      start = args[1] if len(args) == 2 else kw.get("start", 0)
      return tuple((start + i, v) for i, v in enumerate(self.iterate(one, node.args[0])))
    elif name == "zip" and args:
      return tuple(zip(*[self.iterate(a, n) for a, n in zip(args, node.args)]))
    elif name == "map" and len(args) == 2 and args[0] == Builtin("str"):
      return tuple(self.to_text(v, node) for v in self.iterate(args[1], node.args[1]))
    elif name == "bool" and len(args) == 1:
      c = self.truth(one, node)
      return self.compare("ne", c, 0, node) if isinstance(c, Int) and not c.boolean else c
    elif name in ("any", "all") and len(args) == 1:
      out = name == "all"
      for v in self.iterate(one, node.args[0]):
        c = self.truth(v, node)
        out = self.and_(out, c, node) if name == "all" else self.or_(out, c, node)
      return out
    elif name == "divmod" and len(args) == 2:
      return (self.arith("div", *args, node), self.arith("mod", *args, node))
    elif name == "pow" and len(args) == 2:
      return self.power(args[0], args[1], node)
    raise Refusal(f"call `{snippet(node)}` is outside the translatable subset", node)

  def length_of(self, v, node):
    if isinstance(v, Lst):
      return v.length
    if isinstance(v, Answer):
      self.require(node.args[0], "truthy", "taking its length")
      n = self.has_fact(node.args[0], "len")
      return n if isinstance(n, int) and n is not True else Int(NGUESS, 1, self.cfg.list_len)
    if is_const(v) and not isinstance(v, float | int):
      return len(v)
    raise Refusal(f"len() of {snippet(node.args[0])} is outside the translatable subset", node)

  def min_max(self, name, args, node):
    vals = args
    if len(args) == 1:
      if is_const(args[0]) and not isinstance(args[0], tuple):
        return (min if name == "min" else max)(args[0])
      lst = self.lst_from(args[0], node, False)
      if not isinstance(lst.length, int) or lst.length == 0:
        raise Refusal(f"{name}() of a possibly empty list", node)
      if lst.elems is None or lst.reg is not None:
        return self.list_scalar("l" + name, lst, node, (), lst.lo, lst.hi)
      vals = lst.elems
    out = vals[0]
    for v in vals[1:]:
      out = self.minmax(name, out, v, node)
    return out

  def sort(self, v, reverse, node):
    """``sorted(v, reverse=...)`` (``reverse`` None: ``reversed(v)``)."""
    if not is_const(reverse):
      raise Refusal("sorted(reverse=...) must be a constant", node)
    lst = self.lst_from(v, node)
    if lst.elems is not None and all(const_int(x) for x in lst.elems):
      vals = (
        list(reversed(lst.elems)) if reverse is None else sorted(lst.elems, reverse=bool(reverse))
      )
      return self.lst_from(vals, node)
    src = self.list_operand(lst, node)
    if reverse is None:
      return self.list_result("rev", [src], lst.length, lst.lo, lst.hi, node)
    out = self.list_result("sort", [src], lst.length, lst.lo, lst.hi, node)
    if reverse:
      out = self.list_result("rev", [out.reg], lst.length, lst.lo, lst.hi, node)
    return out

  # ----------------------------------------------------------------------------- methods
  def method(self, obj, name, args, kw, node):
    if isinstance(obj, Rng) or obj == Module("random"):
      return self.random_call(name, args, kw, node)
    if kw and not (isinstance(obj, Lst) and name == "sort"):
      raise Refusal(f"keyword arguments in `{snippet(node)}`", node)
    if obj == Module("re") or isinstance(obj, Pattern):
      if isinstance(obj, Pattern):
        args = [obj.text, *args]
      return self.re_call(name, args, node)
    if obj == Module("math") and name == "gcd" and len(args) == 2:
      return self.gcd(args[0], args[1], node)
    if isinstance(obj, MatchObj):
      self.require(node.func.value, "truthy", "reading its groups")
      if name == "group" and len(args) == 1 and const_int(args[0]) and 1 <= args[0] <= obj.groups:
        return MatchStr(int(args[0]) - 1)
      if name == "groups" and not args:
        return tuple(MatchStr(k) for k in range(obj.groups))
    if isinstance(obj, MatchStr) and name in ("strip", "lstrip", "rstrip") and not args:
      return obj
    if isinstance(obj, Lst):
      return self.list_method(obj, name, args, kw, node)
    if isinstance(obj, str) and name in _STR_METHODS and all(is_const(a) for a in args):
      return getattr(obj, name)(*args)
    if isinstance(obj, dict) and name in ("keys", "values", "items", "get"):
      if name == "get":
        return obj.get(*args)
      return tuple(getattr(obj, name)())
    raise Refusal(f"call `{snippet(node)}` is outside the translatable subset", node)

  def list_method(self, lst: Lst, name, args, kw, node):
    if name in MUTATORS:
      if not lst.mutable:
        raise Refusal(f"`{snippet(node)}` mutates a constant or a tuple", node)
      if self.cond is not None:
        raise Refusal(f"`{snippet(node)}` mutates a list under a run-time condition", node)
    if name == "append" and len(args) == 1 or name == "extend" and len(args) == 1:
      new = [args[0]] if name == "append" else list(self.iterate(args[0], node.args[0]))
      vals = list(self.elems(lst, node)) + new
      fresh = self.lst_from(vals, node)
      lst.elems, lst.reg, lst.length, lst.lo, lst.hi = vals, None, len(vals), fresh.lo, fresh.hi
      return None
    if name in ("sort", "reverse") and not args:
      out = self.sort(lst, kw.get("reverse", False) if name == "sort" else None, node)
      lst.elems, lst.reg = out.elems, out.reg
      return None
    if name == "pop" and not args and isinstance(lst.length, int) and lst.length > 0:
      vals = list(self.elems(lst, node))
      lst.elems, lst.reg, lst.length = vals[:-1], None, len(vals) - 1
      return vals[-1]
    if name == "copy" and not args:
      return self.lst_from(lst, node)
    if name == "index" and len(args) == 1:
      if not self.unconditional():
        raise Refusal(f"`{snippet(node)}` may fail on paths Python never runs", node)
      return self.list_scalar("find", lst, node, [args[0]], 0, max(0, max_len(lst, self.cfg) - 1))
    if name == "count" and len(args) == 1:
      return self.list_scalar("count", lst, node, [args[0]], 0, max_len(lst, self.cfg))
    raise Refusal(f"list method `{snippet(node)}` is outside the translatable subset", node)

  # ------------------------------------------------------------------------------ random
  def random_call(self, name, args, kw, node):
    if kw:
      raise Refusal(f"keyword arguments in `{snippet(node)}`", node)
    if name in ("seed", "Random"):
      if len(args) > 1 or args and not isinstance(args[0], Seed):
        raise Refusal(
          f"`{snippet(node)}`: seed only with reset()'s seed argument (a constant seed makes "
          "every episode the same)",
          node,
        )
      return Rng() if name == "Random" else None
    if name not in ("randint", "randrange", "choice", "sample", "shuffle"):
      raise Refusal(f"random.{name} is outside the translatable subset", node)
    code = self.need_code(node, f"`{snippet(node)}`")
    if self.no_draws:
      raise Refusal(f"random draw `{snippet(node)}` in {self.no_draws}", node)
    if not self.unconditional():
      raise Refusal(
        f"random draw `{snippet(node)}` runs only on some paths (under a run-time condition or "
        "after an early return); draws must be unconditional",
        node,
      )
    if name in ("randint", "randrange"):
      if name == "randrange":
        if len(args) == 1:
          args = [0, args[0]]
        if len(args) != 2:
          raise Refusal(f"`{snippet(node)}`: randrange with a step is outside the subset", node)
        args = [args[0], self.arith("sub", args[1], 1, node)]
      a, b = [self.check_int(x, node) for x in args]
      alo, ahi, _ = bounds(a)
      blo, bhi, _ = bounds(b)
      if ahi > blo:
        raise Refusal(f"`{snippet(node)}`: the range may be empty (Python raises)", node)
      if bhi - alo >= INT32_MAX or alo < INT32_MIN or bhi > INT32_MAX:
        raise Refusal(f"`{snippet(node)}`: range too wide for int32 draws", node)
      vals = frozenset(range(alo, bhi + 1)) if bhi - alo < 256 else None
      reg = code.emit("rand", VReg("s"), self.opnd(a, node), self.opnd(b, node))
      return Int(reg, alo, bhi, vals=vals)
    seq = args[0] if args else None
    if name == "choice" and len(args) == 1:
      if isinstance(seq, range):
        if len(seq) == 0:
          raise Refusal(f"`{snippet(node)}`: choice from an empty range", node)
        i = Int(code.emit("rand", VReg("s"), 0, len(seq) - 1), 0, len(seq) - 1)
        return self.arith("add", seq.start, self.arith("mul", i, seq.step, node), node)
      lst = self._population(seq, node)
      if lst.length == 0:
        raise Refusal(f"`{snippet(node)}`: choice from an empty list", node)
      vals = frozenset(lst.elems) if lst.elems and all(const_int(x) for x in lst.elems) else None
      reg = code.emit("choice", VReg("s"), self.list_operand(lst, node))
      return Int(reg, lst.lo, lst.hi, vals=vals)
    if name == "sample" and len(args) == 2:
      k = args[1]
      if not const_int(k):
        raise Refusal(f"`{snippet(node)}`: the sample size must be a constant", node)
      lst = self._population(seq, node)
      if not 0 <= int(k) <= lst.length:
        raise Refusal(f"`{snippet(node)}`: sample larger than the population", node)
      src = self.list_operand(lst, node)
      return Lst(None, code.emit("sample", VReg("l"), src, int(k)), int(k), lst.lo, lst.hi)
    if name == "shuffle" and len(args) == 1:
      if not (isinstance(seq, Lst) and seq.mutable and isinstance(seq.length, int)):
        raise Refusal(f"`{snippet(node)}`: shuffle needs a list of ints built in this method", node)
      if self.cond is not None:
        raise Refusal(f"`{snippet(node)}` mutates a list under a run-time condition", node)
      seq.reg = code.emit("shuffle", VReg("l"), self.list_operand(seq, node))
      seq.elems = None
      return None
    raise Refusal(f"call `{snippet(node)}` is outside the translatable subset", node)

  def _population(self, seq, node) -> Lst:
    if isinstance(seq, range) and len(seq) > self.cfg.list_len:
      raise Refusal(
        f"`{snippet(node)}`: a population of {len(seq)} values exceeds the interpreter's list "
        f"capacity {self.cfg.list_len}",
        node,
      )
    if isinstance(seq, str) or isinstance(seq, tuple | list) and not all(int_like(x) for x in seq):
      raise Refusal(f"`{snippet(node)}`: random choice among non-int values", node)
    lst = self.lst_from(seq, node, False)
    if not isinstance(lst.length, int):
      raise Refusal(f"`{snippet(node)}`: population of run-time length", node)
    return lst

  # ---------------------------------------------------------------------------------- re
  def re_call(self, name, args, node):
    if name == "compile" and len(args) == 1 and isinstance(args[0], str):
      return Pattern(args[0])
    if name not in ("findall", "search") or len(args) != 2:
      raise Refusal(f"re.{name} is outside the translatable subset (use findall/search)", node)
    pattern, text = args
    if isinstance(pattern, Pattern):
      pattern = pattern.text
    if not isinstance(text, ActionText):
      raise Refusal(f"`{snippet(node)}`: regular expressions only parse the step's action", node)
    groups = answer_groups(pattern)
    if groups is None:
      raise Refusal(
        f"regular expression {pattern!r} is not a recognised \\boxed{{}} answer pattern "
        "(ints as (-?\\d+), separated by commas)",
        node,
      )
    if groups > self.cfg.list_len:
      raise Refusal(f"an answer of {groups} ints exceeds the list capacity", node)
    self.answer_parse.add(f"re.{name}")
    return Matches(groups) if name == "findall" else MatchObj(groups)
