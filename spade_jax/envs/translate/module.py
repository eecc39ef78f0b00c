"""Translator: the module level and function calls.

`Modules.load_module` evaluates the module abstractly: imports, constants (evaluated at
translation time), functions (inlined at each call), the library twins' answer parser
``_boxed_ints`` (recognised by its exact source and its two regex constants: calling it *is*
the device parser), and the one ``*Env`` class (no base classes or decorators). `inline` runs
a function or method body in a new frame with its arguments bound; a return inside a run-time
``if`` of a helper is outside the subset (``step``'s own returns become feedback cases).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os

from spade_jax.envs.translate.values import (
  ActionText,
  Answer,
  Bound,
  Function,
  Module,
  Pattern,
  Refusal,
  SelfRef,
  Undefined,
  snippet,
)


@functools.cache
def reference_parser_dump() -> tuple[str, dict]:
  """AST dump of the library twins' ``_boxed_ints`` and its two regex constants."""
  path = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "library", "twins", "guess_number.py"
  )
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_boxed_ints")
  consts = {}
  for n in tree.body:
    if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
      if n.targets[0].id in ("_BOXED", "_INTS"):
        consts[n.targets[0].id] = n.value.args[0].value
  return _dump(fn), consts


def _dump(fn: ast.FunctionDef) -> str:
  return ast.dump(ast.FunctionDef(name="f", args=fn.args, body=fn.body, decorator_list=[]))


@dataclasses.dataclass
class Frame:
  kind: str  # module / init / reset / step / helper
  scopes: list
  entry_cond: object = None
  ret: object = None


class Modules:
  """Module loading and inlined calls (mixed into the lowerer)."""

  # -------------------------------------------------------------------------- functions
  def inline(self, fn: Function, node):
    fdef = fn.node
    args = [self.expr(a) for a in node.args]
    kw = {k.arg: self.expr(k.value) for k in node.keywords}
    if fdef in self.parsers:
      if len(args) != 1 or not isinstance(args[0], ActionText):
        raise Refusal("the answer parser only parses the step's action", node)
      self.answer_parse.add("reference")
      return Answer()
    if fn.method:
      args = [SelfRef()] + args
    if self.depth > 16:
      raise Refusal(f"call depth of `{snippet(node)}` (recursion?) is outside the subset", node)
    scope = self.bind_params(fdef, args, kw, node)
    self.frames.append(Frame("helper", [scope], self.cond))
    self.depth += 1
    saved_facts = self.facts
    try:
      self.block(fdef.body)
      return self.frame.ret
    finally:
      self.depth -= 1
      self.facts = saved_facts
      self.frames.pop()

  def bind_params(self, fdef, args, kw, node) -> dict:
    a = fdef.args
    params = [p.arg for p in a.posonlyargs + a.args]
    defaults = dict(zip(params[len(params) - len(a.defaults) :], a.defaults))
    where = f"{node.name}()" if isinstance(node, ast.FunctionDef) else f"`{snippet(node)}`"
    if len(args) > len(params) and a.vararg is None:
      raise Refusal(f"too many arguments for {where}", node)
    scope = dict(zip(params, args))
    for k, v in kw.items():
      if k in params:
        scope[k] = v
      elif a.kwarg is None:
        raise Refusal(f"unknown argument {k!r} for {where}", node)
    for p in params:
      if p not in scope:
        if p not in defaults:
          raise Refusal(f"missing argument {p!r} for {where}", node)
        scope[p] = self.expr(defaults[p])
    for k, d in zip(a.kwonlyargs, a.kw_defaults):
      scope[k] = kw.get(k, self.expr(d) if d is not None else None)
    if a.vararg is not None:
      scope[a.vararg.arg] = tuple(args[len(params) :])
    if a.kwarg is not None:
      scope[a.kwarg.arg] = {k: v for k, v in kw.items() if k not in params}
    return scope

  # ---------------------------------------------------------------------------- module
  def load_module(self):
    try:
      tree = ast.parse(self.source)
    except SyntaxError as e:
      raise Refusal(f"syntax error: {e.msg}") from None
    self.frames = [Frame("module", [{}])]
    self.parsers, classes = set(), []
    ref_dump, ref_consts = reference_parser_dump()
    for node in tree.body:
      if isinstance(node, ast.Import):
        for al in node.names:
          self.globals[al.asname or al.name.partition(".")[0]] = Module(al.name.partition(".")[0])
      elif isinstance(node, ast.ImportFrom):
        for al in node.names:
          if node.module != "__future__":
            self.globals[al.asname or al.name] = Bound(Module(node.module), al.name)
      elif isinstance(node, ast.FunctionDef):
        if node.decorator_list:
          raise Refusal(f"decorator on function {node.name} is outside the subset", node)
        self.globals[node.name] = Function(node, False)
        if _dump(node) == ref_dump:
          self.parsers.add(node)
      elif isinstance(node, ast.ClassDef):
        classes.append(node)
      elif isinstance(node, ast.Assign | ast.AnnAssign):
        self.stmt(node)
        self.globals.update(self.frame.scopes[0])
      elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        continue
      else:
        raise Refusal(f"module-level `{snippet(node)}` is outside the translatable subset", node)
    for name, pattern in ref_consts.items():
      if not (isinstance(self.globals.get(name), Pattern) and self.globals[name].text == pattern):
        self.parsers = set()
    envs = [c for c in classes if c.name.endswith("Env")]
    if len(envs) != 1:
      raise Refusal("expected exactly one class whose name ends in 'Env'")
    cls = envs[0]
    if cls.bases or cls.keywords or cls.decorator_list:
      raise Refusal(f"class {cls.name} has base classes or decorators (outside the subset)", cls)
    for c in classes:
      if c is not cls:
        self.globals[c.name] = Undefined(c.lineno, f"class {c.name}, defined on line {c.lineno}")
    return cls
