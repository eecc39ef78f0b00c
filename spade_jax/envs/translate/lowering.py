"""Translator: an environment class -> assembly text, through the one visitor (`visitor.py`).

`EnvLowering` reads the module (imports of ``random``/``re``/``math``, constants, compiled
patterns, functions) and the one ``*Env`` class, evaluates ``__init__`` at compile time (its
keyword arguments and constant attributes), then lowers ``reset`` and ``step`` with the same
visitor into the two code sections. Attributes that outlive a call live in home registers.
``solution()`` is lowered at the end of both sections into the answer register; ``reset``'s
observation (a text, possibly chosen among templates at run time) becomes the observation
templates and their selector; ``step``'s 5-tuple becomes the feedback cases: one per
(feedback alternative, outcome) that can occur, the reward a register in thousandths, the
outcome ``go`` / ``stop`` (terminated) / ``trunc`` (truncated) computed at run time.
The answer grammar is the one the environment's regular expression means (`answers.py`).
"""

from __future__ import annotations

import ast
import dataclasses

from spade_jax.envs.ir.parse import GRAMMAR_NAMES
from spade_jax.envs.ir.program import ProgramConfig
from spade_jax.envs.translate import texts as tx
from spade_jax.envs.translate.answers import function_dump, reference_parser
from spade_jax.envs.translate.emit import Emitter, template_line
from spade_jax.envs.translate.kinds import (
  ActionText,
  BoxedIntsParser,
  Builtin,
  ConstDict,
  Func,
  Info,
  Int,
  Lst,
  Milli,
  Module,
  Pattern,
  Rng,
  Seed,
  SelfRef,
  Var,
  is_const,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.texts import Slot, Text
from spade_jax.envs.translate.visitor import Frame, Visitor

_MODULES = ("random", "re", "math", "string", "itertools")
_RESIZERS = frozenset({"append", "extend", "pop", "insert", "remove", "clear"})
_OUTCOME_WORD = ("go", "stop", "trunc")


@dataclasses.dataclass
class Lowered:
  text: str  # assembly
  max_turns: int
  answer_parse: set
  n_cases: int
  line: int = 0  # the environment class's line (for refusals found after lowering)


class EnvLowering:
  def __init__(self, source: str, cfg: ProgramConfig, kwargs: dict | None = None):
    self.source, self.cfg, self.kwargs = source, cfg, dict(kwargs or {})
    self.e = Emitter(cfg)
    self.globals: dict[str, object] = {}
    self.static: dict[str, object] = {}  # compile-time attributes
    self.homes: dict[str, Var] = {}
    self.methods: dict[str, ast.FunctionDef] = {}
    self.grammar: tuple[int, bool] | None = None
    self.regex = False  # the answer is parsed by a regular expression (not `_boxed_ints`)
    self.v = Visitor(self)

  # ----------------------------------------------------------------------------- module
  def load(self) -> None:
    try:
      tree = ast.parse(self.source)
    except SyntaxError as ex:
      raise Refusal(f"syntax error: {ex.msg}") from None
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Env")]
    parsers: list[str] = []
    if len(classes) == 1 and (classes[0].bases or classes[0].decorator_list):
      raise Refusal(f"class {classes[0].name} has base classes or decorators", classes[0])
    if len(classes) != 1:
      raise Refusal("expected exactly one class whose name ends in 'Env'")
    for n in tree.body:
      if isinstance(n, ast.Import):
        for a in n.names:
          if a.name not in _MODULES:
            raise Refusal(f"import {a.name} is outside the translatable subset", n)
          self.globals[a.asname or a.name] = Module(a.name)
      elif isinstance(n, ast.ImportFrom):
        if n.module not in _MODULES:
          raise Refusal(f"from {n.module} import ... is outside the translatable subset", n)
        for a in n.names:
          self.globals[a.asname or a.name] = ("module-fn", n.module, a.name)
      elif isinstance(n, ast.FunctionDef):
        self.globals[n.name] = Func(n, False)
        if function_dump(n) == reference_parser()[0]:
          parsers.append(n.name)
      elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
        self.globals[n.targets[0].id] = self.const_expr(n.value)
      elif isinstance(n, ast.ClassDef) and n is not classes[0]:
        raise Refusal(f"class {n.name} besides the environment", n)
      elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):
        pass
      elif not isinstance(n, ast.ClassDef):
        raise Refusal(f"`{snippet(n)}` at module level is outside the subset", n)
    consts = reference_parser()[1]
    if all(self.globals.get(k) == Pattern(v) for k, v in consts.items()):
      for name in parsers:
        self.globals[name] = BoxedIntsParser()
    cls = self.cls = classes[0]
    if cls.bases or cls.decorator_list:
      raise Refusal(f"class {cls.name} has base classes or decorators", cls)
    for n in cls.body:
      if isinstance(n, ast.FunctionDef):
        self.methods[n.name] = n
      elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
        self.static[n.targets[0].id] = self.const_expr(n.value)
      elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):
        pass
      else:
        raise Refusal(f"`{snippet(n)}` in the class body is outside the subset", n)
    for name in ("reset", "step", "solution"):
      if name not in self.methods:
        raise Refusal(f"the class has no {name}()")

  def const_expr(self, node):
    """A module-level or ``__init__`` value, evaluated at compile time."""
    if isinstance(node, ast.Constant):
      return node.value
    if isinstance(node, ast.Tuple | ast.List):
      return tuple(self.const_expr(x) for x in node.elts)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
      keys = tuple(self.const_expr(k) for k in node.keys)
      return ConstDict(keys, tuple(self.const_expr(x) for x in node.values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
      return -self.const_expr(node.operand)
    if isinstance(node, ast.Name):
      if node.id in self.globals:
        return self.globals[node.id]
      raise Refusal(f"name `{node.id}` is not a compile-time constant", node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
      base = self.const_expr(node.func.value)
      args = [self.const_expr(a) for a in node.args]
      if base == Module("re") and node.func.attr == "compile" and len(args) == 1:
        return Pattern(args[0])
      if base == Module("random") and node.func.attr == "Random" and not args:
        return Rng()
    if isinstance(node, ast.BinOp):
      from spade_jax.envs.translate.exprs import PY_OPS

      a, b = self.const_expr(node.left), self.const_expr(node.right)
      if is_const(a) and is_const(b) and type(node.op) in PY_OPS:
        return PY_OPS[type(node.op)](a, b)
    raise Refusal(f"`{snippet(node)}` is not a compile-time constant", node)

  def module_attr(self, module: str, attr: str, node):
    if module == "string" and attr in ("digits", "ascii_lowercase", "ascii_uppercase"):
      import string

      return getattr(string, attr)
    return ("module-fn", module, attr)

  # ------------------------------------------------------------------------------- init
  def init(self) -> None:
    fdef = self.methods.get("__init__")
    if fdef is None:
      return
    a = fdef.args
    params = [p.arg for p in a.args[1:]]
    defaults = [None] * (len(params) - len(a.defaults)) + list(a.defaults)
    env = {}
    for p, d in zip(params, defaults, strict=True):
      if p in self.kwargs:
        env[p] = self.kwargs[p]
      elif d is not None:
        env[p] = self.const_expr(d)
      else:
        raise Refusal(f"__init__ argument {p} has no value", fdef)
    saved = dict(self.globals)
    self.globals.update(env)
    try:
      for s in fdef.body:
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
          continue
        if (
          isinstance(s, ast.Expr)
          and isinstance(s.value, ast.Call)
          and isinstance(s.value.func, ast.Attribute)
          and isinstance(s.value.func.value, ast.Name)
          and s.value.func.value.id == "self"
        ):
          continue  # self.reset() and friends: the harness calls reset itself
        if isinstance(s, ast.Assign | ast.AnnAssign):
          targets = s.targets if isinstance(s, ast.Assign) else [s.target]
          if s.value is None:
            continue
          try:
            value = self.const_expr(s.value)
          except Refusal:
            continue  # set again by reset before use, or refused when read
          for t in targets:
            self._init_store(t, value)
          continue
        raise Refusal(f"`{snippet(s)}` in __init__ is outside the subset", s)
    finally:
      self.globals = saved

  def _init_store(self, t, value) -> None:
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
      self.static[t.attr] = value
    elif isinstance(t, ast.Tuple) and isinstance(value, tuple) and len(value) == len(t.elts):
      for x, y in zip(t.elts, value, strict=True):
        self._init_store(x, y)

  # ------------------------------------------------------------------------- attributes
  def written_attrs(self) -> set[str]:
    out = set()
    for name, fdef in self.methods.items():
      if name == "__init__":
        continue
      for n in ast.walk(fdef):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
          if isinstance(n.value, ast.Name) and n.value.id == "self":
            out.add(n.attr)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
          f = n.func
          if isinstance(f.value, ast.Attribute) and isinstance(f.value.value, ast.Name):
            if f.value.value.id == "self":
              out.add(f.value.attr)  # self.x.append(...)
    return out

  def scan_attrs(self) -> None:
    """How often each ``self.x`` is assigned outside ``__init__``, and which lists are resized
    (their compile-time length is kept only when assigned once and never resized)."""
    self.stores: dict[str, int] = {}
    self.resized: set[str] = set()
    for name, fdef in self.methods.items():
      if name == "__init__":
        continue
      for n in ast.walk(fdef):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
          self.stores[n.attr] = self.stores.get(n.attr, 0) + 1
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Attribute):
          self.stores[n.target.attr] = self.stores.get(n.target.attr, 0) + 1
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
          if n.func.attr in _RESIZERS and isinstance(n.func.value, ast.Attribute):
            self.resized.add(n.func.value.attr)

  def read_attr(self, name: str, node, v: Visitor):
    if name in self.homes:
      return v.read_var(self.homes[name])
    if name in self.static:
      return self.static[name]
    if name in self.methods:
      return Func(self.methods[name], True)
    raise Refusal(f"`self.{name}` is read before it is assigned", node)

  def assign_attr(self, name: str, value, node, v: Visitor) -> None:
    value = v.read_var(value)
    if name not in self.homes:
      if isinstance(value, Rng | Module | Pattern):
        self.static[name] = value
        return
      if name in self.static and is_const(self.static[name]) and is_const(value):
        if self.static[name] == value and name not in self.mutable:
          return
      self.homes[name] = v.new_var(value, node, home=True)
      if isinstance(value, Lst) and self.stores.get(name) == 1 and name not in self.resized:
        self.homes[name].length = value.length
    var = self.homes[name]
    if var.kind == "const":
      if value != var.ref:
        raise Refusal(f"`self.{name}` holds values of different kinds", node)
      return
    v.write_var(var, value, node, home=True)

  def home_text(self, t: Text) -> Text:
    """A copy of ``t`` whose shown registers are homes (it outlives the call)."""
    alts = []
    for alt in t.alts:
      items = []
      for it in alt:
        if isinstance(it, Slot):
          if it.is_list:
            r = self.e.lists.home()
            self.e.emit("copy", r, it.name)
          else:
            r = self.e.regs.home()
            self.e.emit("set", r, it.name)
          items.append(Slot(r))
        else:
          items.append(it)
      alts.append(tuple(items))
    return Text(alts, t.sel)

  def use_grammar(self, grammar: int, last: bool | None, node) -> None:
    if self.grammar is None:
      self.grammar = (grammar, bool(last))
      self._grammar_last_known = last is not None
      return
    g, was_last = self.grammar
    if g != grammar:
      raise Refusal("the answer is parsed with two different patterns", node)
    if last is not None:
      if getattr(self, "_grammar_last_known", False) and was_last != last:
        raise Refusal("the answer uses both the first and the last match", node)
      self.grammar = (g, last)
      self._grammar_last_known = True

  # ------------------------------------------------------------------------------- run
  def call_method(self, name: str, args: list, section_node):
    fdef = self.methods[name]
    v = self.v
    top = Frame(self.e.new_label())
    top.names["self"] = SelfRef()
    v.frames.append(top)
    try:
      return v.inline(fdef, args, {}, section_node, True)
    finally:
      v.frames.pop()

  def run(self) -> Lowered:
    self.load()
    self.init()
    self.mutable = self.written_attrs()
    self.scan_attrs()
    e, v = self.e, self.v
    # reset
    e.begin("reset")
    with e.statement():
      for name in sorted(self.mutable & set(self.static)):
        value = self.static.pop(name)
        if is_const(value) and not isinstance(value, str | tuple):
          self.homes[name] = v.new_var(value, None, home=True)
          top = Frame(e.new_label())
          v.frames.append(top)
          v.write_var(self.homes[name], value, None, home=True)
          v.frames.pop()
        else:
          self.static[name] = value
    reset = self.methods["reset"]
    n_params = len(reset.args.args) - 1
    out = self.call_method("reset", [Seed()] * min(n_params, 1), reset)
    obs = out[0] if isinstance(out, tuple) and len(out) == 2 else out
    obs = self.as_top_text(obs, reset)
    answer = self.solution()
    obs_sel = obs.sel
    # step
    e.begin("step")
    step = self.methods["step"]
    result = self.call_method("step", [ActionText()], step)
    if not (isinstance(result, tuple) and len(result) in (4, 5)):
      raise Refusal("step() must return (feedback, reward, terminated, truncated, info)", step)
    answer2 = self.solution()
    if answer2 != answer:
      raise Refusal("solution() lowers differently after step()", self.methods["solution"])
    cases = self.cases(result, step)
    try:
      e.check_fits()
    except Refusal as ex:
      raise Refusal(ex.msg, self.cls) from None
    lines = [f"turns {self.cfg.max_turns_cap}"] + e.section_text()
    lines.append(f"answer {answer}")
    if self.grammar is not None:
      g, last = self.grammar
      if g >= len(GRAMMAR_NAMES):
        raise Refusal(f"the device parser has no answer grammar {g}", self.cls)
      if g:
        lines.append(f"parse {GRAMMAR_NAMES[g]} {'last' if last else 'first'}")
    if obs_sel is not None:
      lines.append(f"obssel {obs_sel}")
    for alt in obs.alts:
      lines.append(template_line("obs", alt or ("",)))
    lines += cases
    parse = {"regex"} if self.regex else {"reference"}
    return Lowered(
      "\n".join(lines) + "\n", self.cfg.max_turns_cap, parse, len(cases), self.cls.lineno
    )

  def as_top_text(self, value, node) -> Text:
    t = self.v.as_text(value, node)
    if len(t.alts) > self.cfg.n_obs:
      raise Refusal(
        f"the observation has {len(t.alts)} templates, more than the interpreter's", node
      )
    if t.sel is not None and not isinstance(t.sel, str):
      t = Text(t.alts, None)
    if isinstance(t.sel, str):
      self.e.pin(t.sel)
    return t

  def solution(self) -> str:
    """Lowers solution() into the answer home; returns its register name."""
    fdef = self.methods["solution"]
    v = self.v
    with self.e.statement():
      value = v.read_var(self.call_method("solution", [], fdef))
      t = v.as_text(value, fdef)
      if len(t.alts) == 1 and len(t.alts[0]) == 3 and t.alts[0][0] == "\\boxed{":
        if t.alts[0][2] == "}":  # "\boxed{X}": the validator boxes it once, the answer is X
          t = Text([t.alts[0][1:2]], None)
      ret = next((n for n in ast.walk(fdef) if isinstance(n, ast.Return)), fdef)
      items = t.alts[0] if len(t.alts) == 1 else ()
      ints = items[::2]
      if (
        len(items) > 1
        and all(isinstance(x, Slot) and not x.is_list for x in ints)
        and all(x == ", " for x in items[1::2])
      ):  # "a, b, c" of several ints: a list answer
        r = self.e.temp_list()
        self.e.emit("clear", r)
        for x in ints:
          self.e.emit("push", r, x.name)
        items = (Slot(r),)
      if len(items) != 1 or not isinstance(items[0], Slot):
        raise Refusal(
          "solution() must return ints: one int, or ints joined by ', ' (this returns text)", ret
        )
      slot = items[0]
      if not hasattr(self, "_answer"):
        self._answer = self.e.lists.home() if slot.is_list else self.e.regs.home()
      if slot.is_list != self._answer.startswith("l"):
        raise Refusal("solution() returns an int and a list", ret)
      self.e.emit("copy" if slot.is_list else "set", self._answer, slot.name)
    return self._answer

  def cases(self, result, node) -> list[str]:
    v, e = self.v, self.e
    fb, reward, done, trunc = (v.read_var(x) for x in result[:4])
    with e.statement():
      fb = v.as_text(fb, node)
      sel = tx.selector(fb)
      rew = v.milli_operand(reward, node)
      if isinstance(rew, str):
        rew = v.slot_copy(rew)
      d, t = v.truth(done, node), v.truth(trunc, node)
      if isinstance(d, bool) and isinstance(t, bool):
        outcomes = [1 if d else (2 if t else 0)]
        st = outcomes[0]
      else:
        st = e.local()
        dd = 1 if d is True else (0 if d is False else d)
        tt = 1 if t is True else (0 if t is False else t)
        e.emit("sel", st, tt, 2, 0)
        e.emit("sel", st, dd, 1, st)
        outcomes = [
          o for o in (0, 1, 2) if (o != 1 or d is not False) and (o != 2 or t is not False)
        ]
      lines = []
      pairs = [(k, o) for k in range(len(fb.alts)) for o in outcomes]
      records = fb.origin.outcomes if isinstance(fb.origin, tx.TextVar) else []
      if records and records[-1][1] == len(fb.alts) and records[0][0] == 0:
        seen = {(k, o) for a, b, outs in records for k in range(a, b) for o in outs}
        pairs = [p for p in pairs if p in seen]
      single = len(pairs) == 1
      if not single:
        cid = e.local()
        e.emit("mul", cid, sel, 3)
        e.emit("add", cid, cid, st)
      for k, o in pairs:
        pred = 1
        if not single:
          pred = e.local()
          e.emit("eq", pred, cid, 3 * k + o)
        lines.append(template_line(f"case {pred} {rew} {_OUTCOME_WORD[o]}", fb.alts[k] or ("",)))
    if len(lines) > self.cfg.n_cases:
      raise Refusal(
        f"step() has {len(lines)} (feedback, outcome) cases, the interpreter holds "
        f"{self.cfg.n_cases}",
        node,
      )
    return lines


def lower_source(source: str, cfg: ProgramConfig, kwargs: dict | None = None) -> Lowered:
  """Python environment source -> `Lowered` (assembly text); raises `Refusal`."""
  return EnvLowering(source, cfg, kwargs).run()


__all__ = ["Builtin", "Info", "Int", "Lst", "Milli", "lower_source"]
