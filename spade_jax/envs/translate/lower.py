"""Translator: the lowerer's state, statements and control flow.

`Lowerer` combines the mixins (module and calls, idioms, expressions, facts, machine ops) with
the evaluation state: frames of local scopes, ``self`` attributes, the current run-time guard
(``cond``), facts, and the code being emitted. `program.EnvLowering` drives it over
the environment class.

Control flow. Ifs with a constant test are folded. A run-time ``if`` runs both branches as
straight-line code; variables and attributes assigned differently are merged with ``sel``
(text becomes a two-way choice). After a branch that always returns, only the other branch's
state continues. Each ``return`` of ``step`` is recorded as a feedback case whose predicate
is the conjunction of the enclosing run-time conditions (`step.py`): the interpreter
takes the first true case, which reproduces Python's early returns exactly, since a case can
only be reached when no earlier return fired. ``for`` loops over known-length iterables are
unrolled; ``while``, ``try``, ``with``, ``raise`` and nested definitions are refused.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses

from spade_jax.envs.ir.program import ProgramConfig
from spade_jax.envs.translate.calls import Calls
from spade_jax.envs.translate.expr import BUILTINS, Exprs
from spade_jax.envs.translate.idioms import Idioms
from spade_jax.envs.translate.ir import Code, Tables
from spade_jax.envs.translate.module import Frame, Modules
from spade_jax.envs.translate.ops import kind_name
from spade_jax.envs.translate.values import (
  TURN,
  Answer,
  Bound,
  Builtin,
  Choice,
  Function,
  Int,
  Lst,
  Module,
  Pattern,
  Refusal,
  Rng,
  SelfRef,
  Text,
  Undefined,
  const_int,
  snippet,
)

_MODULES = ("random", "re", "math", "string", "itertools", "collections", "functools")
_STMT_NAMES = {
  "While": "while loop",
  "Try": "try statement",
  "TryStar": "try statement",
  "With": "with statement",
  "Raise": "raise statement",
  "Assert": "assert statement",
  "Delete": "del statement",
  "Global": "global statement",
  "Nonlocal": "nonlocal statement",
  "FunctionDef": "nested function",
  "ClassDef": "nested class",
  "Import": "import inside a method",
  "ImportFrom": "import inside a method",
  "Break": "break",
  "Continue": "continue",
  "Match": "match statement",
}


@dataclasses.dataclass
class Case:
  pred: object  # Int or None (always)
  text: object
  milli: int
  stop: bool
  trunc: object
  attrs: dict
  node: ast.AST


class Lowerer(Modules, Calls, Idioms, Exprs):
  def __init__(self, source: str, cfg: ProgramConfig, kwargs: dict | None = None):
    self.source, self.cfg, self.kwargs = source, cfg, dict(kwargs or {})
    self.globals: dict = {}
    self.frames: list[Frame] = []
    self.attrs: dict = {}
    self.cond = None
    self.facts: dict = {}
    self._refining: set = set()
    self.code: Code | None = None
    self.tables = Tables(cfg)
    self.answer_parse: set = set()
    self.returns: list[Case] = []
    self.counter = None
    self.depth = 0
    self.no_draws: str | None = None  # set while lowering solution()
    self.methods: dict = {}
    self.class_consts: dict = {}
    self.parsers: set = set()

  # ---------------------------------------------------------------------------- scopes
  @property
  def frame(self) -> Frame:
    return self.frames[-1]

  def push_scope(self):
    self.frame.scopes.append({})

  def pop_scope(self):
    self.frame.scopes.pop()

  def bind(self, target, value):
    if isinstance(target, ast.Name):
      self.forget(target.id)
      self.frame.scopes[-1][target.id] = value
    elif isinstance(target, ast.Tuple | ast.List):
      items = self.unpack(value, len(target.elts), target)
      for t, v in zip(target.elts, items):
        self.bind(t, v)
    elif isinstance(target, ast.Attribute) and isinstance(self.expr(target.value), SelfRef):
      self.set_attr(target.attr, value, target)
    elif isinstance(target, ast.Subscript):
      self.store_item(target, value)
    else:
      raise Refusal(f"assignment to `{snippet(target)}` is outside the translatable subset", target)

  def unpack(self, value, n, node) -> list:
    if isinstance(value, Lst):
      if value.length != n:
        raise Refusal(f"cannot unpack {kind_name(value)} into {n} names", node)
      return list(self.elems(value, node))
    if isinstance(value, tuple | list | range | str) and len(value) == n:
      return list(value)
    raise Refusal(f"cannot unpack {kind_name(value)} into {n} names", node)

  def lookup(self, name, node):
    for scope in reversed(self.frame.scopes if self.frames else []):
      if name in scope:
        return scope[name]
    if name in self.globals:
      return self.globals[name]
    if name in BUILTINS or hasattr(builtins, name):
      return Builtin(name)
    raise Refusal(f"name `{name}` is not defined", node)

  def getattr_value(self, obj, attr, node):
    if isinstance(obj, SelfRef):
      if attr in self.attrs:
        v = self.attrs[attr]
        if isinstance(v, Undefined):
          raise Refusal(f"`self.{attr}` is only assigned on some paths (line {v.line})", node)
        if v == "pre-increment":
          raise Refusal(f"`self.{attr}` is read before it is incremented", node)
        return v
      if attr in self.methods:
        return Function(self.methods[attr], True)
      if attr in self.class_consts:
        return self.class_consts[attr]
      raise Refusal(f"`self.{attr}` is read before reset() assigns it", node)
    if isinstance(obj, Module):
      if obj.name == "string" and attr in (
        "ascii_lowercase",
        "ascii_uppercase",
        "digits",
        "ascii_letters",
      ):
        import string

        return getattr(string, attr)
      if obj.name in ("random", "re", "math"):
        return Bound(obj, attr)
      raise Refusal(f"`{snippet(node)}` is outside the translatable subset", node)
    if isinstance(obj, Rng | Lst | str | dict | tuple | Pattern) or type(obj).__name__ in (
      "MatchObj",
      "MatchStr",
    ):
      return Bound(obj, attr)
    raise Refusal(f"attribute `{snippet(node)}` of {kind_name(obj)}", node)

  def set_attr(self, attr, value, node):
    if isinstance(value, Answer) or type(value).__name__.startswith("Match"):
      raise Refusal(f"`self.{attr}` cannot hold a parsed answer between calls", node)
    if attr == self.counter and self.frame.kind == "step":
      raise Refusal(f"`self.{attr}` (the turn counter) may only be incremented once", node)
    self.forget(f"self.{attr}")
    self.attrs[attr] = value

  def store_item(self, target, value):
    lst = self.expr(target.value)
    if not (isinstance(lst, Lst) and lst.mutable and isinstance(lst.length, int)):
      raise Refusal(f"item assignment `{snippet(target)}` needs a list of ints", target)
    if self.cond is not None:
      raise Refusal(f"`{snippet(target)}` mutates a list under a run-time condition", target)
    idx = self.expr(target.slice)
    if not const_int(idx) or not -lst.length <= int(idx) < lst.length:
      raise Refusal(f"`{snippet(target)}`: only constant in-range indexes can be assigned", target)
    vals = list(self.elems(lst, target))
    vals[int(idx)] = self.check_int(value, target)
    fresh = self.lst_from(vals, target)
    lst.elems, lst.reg, lst.lo, lst.hi = vals, None, fresh.lo, fresh.hi

  def unconditional(self) -> bool:
    return self.cond is None and not (
      self.frames and self.frames[0].kind == "step" and self.returns
    )

  # -------------------------------------------------------------------------- statements
  def block(self, stmts) -> bool:
    """Runs statements; True if the block always returns."""
    for s in stmts:
      if self.stmt(s):
        return True
    return False

  def stmt(self, node) -> bool:
    name = type(node).__name__
    if name in _STMT_NAMES:
      raise Refusal(f"{_STMT_NAMES[name]} is outside the translatable subset", node)
    method = getattr(self, f"stmt_{name}", None)
    if method is None:
      raise Refusal(f"statement `{snippet(node)}` is outside the translatable subset", node)
    return bool(method(node))

  def stmt_Pass(self, node):
    return False

  def stmt_Expr(self, node):
    if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
      return False
    if self.frame.kind == "init" and _is_self_call(node.value, "reset"):
      return False
    self.expr(node.value)
    return False

  def stmt_Assign(self, node):
    value = self.expr(node.value)
    for t in node.targets:
      self.bind(t, value)
    return False

  def stmt_AnnAssign(self, node):
    if node.value is not None:
      self.bind(node.target, self.expr(node.value))
    return False

  def stmt_AugAssign(self, node):
    t = node.target
    if (
      self.frame.kind == "step"
      and isinstance(t, ast.Attribute)
      and t.attr == self.counter
      and self.attrs.get(t.attr) == "pre-increment"
    ):
      self.attrs[t.attr] = Int(TURN, 1, self.cfg.max_turns_cap)
      return False
    load = ast.copy_location(type(t)(**{**vars(t), "ctx": ast.Load()}), t)
    value = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
    self.bind(t, self.expr(value))
    return False

  def stmt_For(self, node):
    if node.orelse:
      raise Refusal("for ... else is outside the translatable subset", node)
    items = self.iterate(self.expr(node.iter), node.iter)
    for item in items:
      self.bind(node.target, item)
      if self.block(node.body):
        return True
    return False

  def stmt_If(self, node):
    test = self.condition(node.test)
    if not isinstance(test, Int):
      return self.block(node.body if test else node.orelse)
    base, saved = self.cond, self.save()
    self.cond = test if base is None else self.and_(base, test, node)
    self.with_facts(self.derive(node.test, True))
    then_ret = self.block(node.body)
    then_state = self.save()
    self.restore(saved)
    self.cond = base  # the else branch needs no `not test`: the then branch always returned
    if not then_ret:
      neg = self.not_(test, node)
      self.cond = neg if base is None else self.and_(base, neg, node)
    self.with_facts(self.derive(node.test, False))
    else_ret = self.block(node.orelse)
    else_state = self.save()
    self.cond = base
    if then_ret and else_ret:
      return True
    if then_ret or else_ret:
      self.restore(else_state if then_ret else then_state)
      return False
    self.restore(saved)
    self.merge_states(test, then_state, else_state, node)
    return False

  def save(self):
    return ([dict(s) for s in self.frame.scopes], dict(self.attrs), self.facts)

  def restore(self, state):
    scopes, attrs, facts = state
    self.frame.scopes[:] = [dict(s) for s in scopes]
    self.attrs, self.facts = dict(attrs), facts

  def merge_states(self, test, a, b, node):
    def merge_dicts(da, db):
      out = {}
      for k in list(da) + [k for k in db if k not in da]:
        if k in da and k in db:
          out[k] = da[k] if da[k] is db[k] else self.merge(test, da[k], db[k], node)
        else:
          out[k] = Undefined(node.lineno)
      return out

    self.frame.scopes[:] = [merge_dicts(x, y) for x, y in zip(a[0], b[0])]
    self.attrs = merge_dicts(a[1], b[1])

  def stmt_Return(self, node):
    kind = self.frame.kind
    if kind == "step" and len(self.frames) == 1:
      self.step_return(node)
      return True
    if self.cond is not self.frame.entry_cond:
      raise Refusal(f"{kind}: a return under a run-time condition is outside the subset", node)
    if kind == "reset" and len(self.frames) == 1:
      elts = node.value.elts if isinstance(node.value, ast.Tuple) else None
      if elts is None or len(elts) != 2:
        raise Refusal("reset() must return an (observation, info) tuple literal", node)
      self.frame.ret = self.text_value(self.expr(elts[0]), elts[0], allow_choice=False)
      self.check_info(elts[1])
      return True
    self.frame.ret = self.expr(node.value) if node.value is not None else None
    self.last_return = node
    return True

  def check_info(self, node):
    if any(isinstance(n, ast.Call) for n in ast.walk(node)):
      self.expr(node)

  def text_value(self, v, node, allow_choice=True):
    v = self.to_text(v, node) if not isinstance(v, str | Text) else v
    for it in v.items if isinstance(v, Text) else []:
      if isinstance(it, Choice):
        if not allow_choice:
          raise Refusal(
            f"reset()'s observation `{snippet(node)}` depends on a run-time condition", node
          )
        self.text_value(it.a, node)
        self.text_value(it.b, node)
      if isinstance(it, Lst):
        self.list_reg(it, node)
    return v

  def step_return(self, node):
    elts = node.value.elts if isinstance(node.value, ast.Tuple) else None
    if elts is None or len(elts) != 5:
      raise Refusal(
        "step() must return a 5-tuple literal (obs, reward, terminated, truncated, info)", node
      )
    text = self.text_value(self.expr(elts[0]), elts[0])
    reward = self.expr(elts[1])
    if not (isinstance(reward, int | float) and not isinstance(reward, bool)):
      raise Refusal(f"reward `{snippet(elts[1])}` must be a constant number", elts[1])
    milli = round(reward * 1000)
    if abs(milli - reward * 1000) > 1e-6 or abs(milli) > 1000:
      raise Refusal(f"reward {reward!r} must be a multiple of 0.001 in [-1, 1]", elts[1])
    stop = self.expr(elts[2])
    if type(stop) is not bool:
      raise Refusal(f"terminated `{snippet(elts[2])}` must be the constant True or False", elts[2])
    trunc = self.expr(elts[3])
    self.check_info(elts[4])
    attrs = {k: _frozen(v) for k, v in self.attrs.items()}
    self.returns.append(Case(self.cond, text, milli, stop, trunc, attrs, node))


def _frozen(v):
  """A snapshot of a value at a return (lists are mutable Python objects)."""
  if isinstance(v, Lst):
    return Lst(v.elems and list(v.elems), v.reg, v.length, v.lo, v.hi, v.mutable)
  return v


def _is_self_call(node, name: str) -> bool:
  return (
    isinstance(node, ast.Call)
    and isinstance(node.func, ast.Attribute)
    and node.func.attr == name
    and isinstance(node.func.value, ast.Name)
    and node.func.value.id == "self"
  )
