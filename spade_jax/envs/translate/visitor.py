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

from spade_jax.envs.translate import coerce, exprs, loops, variables
from spade_jax.envs.translate import compare as comparisons
from spade_jax.envs.translate.kinds import (
  Int,
  SelfRef,
  Var,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet

MAX_INLINE_DEPTH = 8


class Frame:
  """One inlined call: its names, its return slot and labels."""

  def __init__(self, end: str):
    self.names: dict[str, object] = {}
    self.end = end
    self.result = None  # a Var (or nested tuple of Vars) once the first return is seen
    self.direct = None  # the value of a single trailing return
    self.loops: list[tuple[str, str]] = []  # (continue label, break label)
    self.handlers: list[str] = []  # labels of the enclosing `try` handlers
    self.optional = False  # returns None on some path and a value on another
    self.multi: set[str] = set()  # names assigned more than once or in a loop
    self.resized: set[str] = set()  # list names whose length changes (append, pop ...)
    self.sites: dict[str, int] = {}  # assignment sites per name


def _assigned_names(body) -> tuple[set[str], set[str], dict[str, int]]:
  """(names assigned exactly once outside loops, names assigned otherwise, assignment sites
  per name)."""
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
  return set(counts) - multi, multi, counts


def _is_none(node) -> bool:
  return isinstance(node, ast.Constant) and node.value is None


def _merge_only(var) -> None:
  if isinstance(var, Var) and var.kind == "text":
    var.ref.home = True
  elif isinstance(var, Var) and var.kind == "tuple":
    for v in var.ref:
      _merge_only(v)


class Visitor:
  """Lowers method bodies. ``env`` is the `lowering.EnvLowering` that owns the attributes,
  module names, the answer grammar and the emitter."""

  def __init__(self, env):
    self.env = env
    self.e = env.e
    self.frames: list[Frame] = []
    self.regions = [0]  # the chain of run-time branch / loop bodies being lowered
    self._region_ids = 0
    self.dynamic_loops = (
      0  # IR loops emitted so far (a comprehension inside one has no static length)
    )

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
    frame = Frame(self.e.new_label())
    once, multi, frame.sites = _assigned_names(fdef.body)
    frame.multi = multi
    frame.resized = {
      n.func.value.id
      for n in ast.walk(fdef)
      if isinstance(n, ast.Call)
      and isinstance(n.func, ast.Attribute)
      and isinstance(n.func.value, ast.Name)
      and n.func.attr in ("append", "extend", "pop", "insert", "remove", "clear")
    }
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
      rets = [n for n in ast.walk(fdef) if isinstance(n, ast.Return)]
      none = [r for r in rets if r.value is None or _is_none(r.value)]
      frame.optional = bool(none) and len(none) < len(rets)
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
    load = ast.copy_location(ast.parse(ast.unparse(s.target), mode="eval").body, s.target)
    value = self.binop(op, self.expr(load), self.expr(s.value), s)
    self.store(s.target, value, s)

  def stmt_If(self, s):
    c = self.cond(s.test)
    if isinstance(c, bool):
      self.block(s.body if c else s.orelse)
      return
    other, end = self.e.new_label(), self.e.new_label()
    self.e.emit("jz", c, other if s.orelse else end)
    self.region_block(s.body)
    if s.orelse:
      self.e.emit("jmp", end)
      self.e.place(other)
      self.region_block(s.orelse)
    self.e.place(end)

  def region_block(self, stmts, loop: bool = False) -> None:
    """Statements that run only under a run-time condition (or repeatedly: ``loop``)."""
    self._region_ids += 1
    self.regions.append(-self._region_ids if loop else self._region_ids)
    try:
      self.block(stmts) if isinstance(stmts, list) else stmts()
    finally:
      self.regions.pop()

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
    self.dynamic_loops += 1
    self.region_block(s.body, loop=True)
    self.frame.loops.pop()
    self.e.emit("jmp", top)
    self.e.place(end)

  def stmt_Try(self, s):
    """``try`` whose handlers catch ``ValueError`` (or everything): the only exceptions the
    lowering raises on purpose are `raise_unless`'s (``int()`` of a box's content); the handler
    runs when one is raised in the body."""
    if s.orelse or s.finalbody:
      raise Refusal("`try` with `else` / `finally` is outside the translatable subset", s)
    for h in s.handlers:
      names = [] if h.type is None else (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])
      ok = all(isinstance(n, ast.Name) and n.id in ("ValueError", "Exception") for n in names)
      if not ok or h.name is not None:
        raise Refusal(f"`except` of {ast.unparse(h.type) if h.type else '...'}: only ValueError", h)
    handler, end = self.e.new_label(), self.e.new_label()
    self.frame.handlers.append(handler)
    self.region_block(s.body)
    self.frame.handlers.pop()
    self.e.emit("jmp", end)
    self.e.place(handler)
    self.region_block(s.handlers[0].body)
    self.e.place(end)

  def raise_unless(self, cond: str, what: str, node) -> None:
    """Python raises ``what`` here unless ``cond``: jump to the innermost handler, or (no
    handler) fault as the uncaught exception would end the environment."""
    if self.frame.handlers:
      self.e.emit("jz", cond, self.frame.handlers[-1])
      return
    ok, empty, t = self.e.new_label(), self.e.temp_list(), self.e.temp()
    self.e.emit("jnz", cond, ok)
    self.e.emit("clear", empty)
    self.e.emit("lmin", t, empty)  # an index fault: Python's uncaught exception
    self.e.place(ok)

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
      v = self.read_var(value)
      if f.optional and (v is None or isinstance(v, int | Int)) and not isinstance(v, bool):
        f.result = Var("maybe", (self.e.local(), self.e.local()))  # an int or None
      else:
        f.result = self.new_var(value, s)
      _merge_only(f.result)  # returns meet at the call's end: their texts add up
    self.write_var(f.result, value, s)
    self.e.emit("jmp", f.end)

  def stmt_For(self, s):
    if s.orelse:
      raise Refusal("`for ... else` is outside the translatable subset", s)
    self.loop(s.target, s.iter, lambda: self.block(s.body), s)

  # methods defined in loops.py, exprs.py and coerce.py
  rebind = variables.rebind
  store = variables.store
  snapshot = variables.snapshot
  assign_name = variables.assign_name
  bind_once = variables.bind_once
  new_var = variables.new_var
  write_var = variables.write_var
  read_var = variables.read_var
  loop = loops.loop
  iterable = loops.iterable
  seq_iter = loops.seq_iter
  length_of = loops.length_of
  item_at = loops.item_at
  slice = loops.slice
  push_get = loops.push_get
  clamp_index = loops.clamp_index
  count_loop = loops.count_loop
  extend = loops.extend
  expr_ListComp = loops.expr_ListComp
  expr_GeneratorExp = loops.expr_GeneratorExp
  comprehension = loops.comprehension
  reduce_comprehension = loops.reduce_comprehension
  push_value = loops.push_value
  comp_loops = loops.comp_loops
  shadowed = exprs.shadowed
  lookup = exprs.lookup
  expr = exprs.expr
  expr_Constant = exprs.expr_Constant
  expr_Name = exprs.expr_Name
  expr_Tuple = exprs.expr_Tuple
  expr_Dict = exprs.expr_Dict
  expr_List = exprs.expr_List
  expr_Attribute = exprs.expr_Attribute
  expr_JoinedStr = exprs.expr_JoinedStr
  expr_UnaryOp = exprs.expr_UnaryOp
  expr_BinOp = exprs.expr_BinOp
  binop = exprs.binop
  milli_op = exprs.milli_op
  power = exprs.power
  expr_BoolOp = exprs.expr_BoolOp
  expr_Compare = comparisons.expr_Compare
  compare = comparisons.compare
  repeat = exprs.repeat
  group_digits = exprs.group_digits
  branch_value = comparisons.branch_value
  dict_get = comparisons.dict_get
  text_compare = comparisons.text_compare
  or_ = comparisons.or_
  negate = comparisons.negate
  contains = comparisons.contains
  expr_IfExp = comparisons.expr_IfExp
  select = comparisons.select
  expr_Subscript = exprs.expr_Subscript
  make_range = exprs.make_range
  expr_Call = exprs.expr_Call
  cond = coerce.cond
  truth = coerce.truth
  as_int = coerce.as_int
  operand = coerce.operand
  milli_operand = coerce.milli_operand
  as_list = coerce.as_list
  const_get = coerce.const_get
  as_text = coerce.as_text
  slot_copy = coerce.slot_copy
  minmax = coerce.minmax
  match_found = coerce.match_found
