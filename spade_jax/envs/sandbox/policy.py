"""What designer-written environment code may do, and the static (AST) check that enforces it.

This module is the single source of truth for the policy shared by the host (the validator's
`static` stage and `SandboxPool.make_env`) and the sandboxed worker (its restricted builtins,
restricted `__import__` and safe `getattr`). It imports only the standard library because the
worker runs it with `python -S` outside the package (see sandbox/worker.py).

The static check never executes the code: it parses it, walks the tree iteratively (no
recursion limit to blow), and returns the first problem with its line. It stops, before any
code runs: imports outside the allow-list, relative imports, dangerous builtins (`open`, `exec`,
`eval`, `compile`, `__import__`, `globals`, `vars`, `input`, ...), dunder names and dunder
attributes (the `().__class__.__base__.__subclasses__()` family), frame/code/traceback
attributes (`gi_frame`, `f_back`, `f_globals`, `tb_frame`, ...), private attributes of anything
but `self`/`cls`, assignments into imported modules (monkeypatching `random.Random.randint`),
attribute walks inside literal `str.format` templates, and sources that do not define exactly
one `*Env` class of the right shape.

Two kinds of environment pass (`source_kind`): a *game*, whose `*Env` class defines
`reset(self, seed)`, `step(self, action)` and `solution(self)`; and a *tool environment*, whose
`*Env` class subclasses `ToolEnv` (`from tool_env import ToolEnv`, or `tool_env.ToolEnv`),
directly or through classes defined in the same module, and defines `reset(self, seed)` and
`solution(self)` but not `step` (ToolEnv owns the tool-call protocol; see sandbox/tool_env.py).
"""

from __future__ import annotations

import ast
import string
from dataclasses import dataclass

# docs/DESIGN.md §3.6: the only modules an environment may import. `__future__` is a compiler
# directive (e.g. `from __future__ import annotations`), not a runtime capability.
# `tool_env` is the sandbox's own ToolEnv base (sandbox/tool_env.py), served read-only.
ALLOWED_MODULES = frozenset(
  {
    "random",
    "re",
    "math",
    "itertools",
    "collections",
    "functools",
    "string",
    "json",
    "tool_env",
    "__future__",
  }
)
# Submodules importable as `import collections.abc` / `from collections.abc import X`.
ALLOWED_SUBMODULES = frozenset({"collections.abc"})

# Builtins removed from the environment module's namespace (and rejected by name statically).
FORBIDDEN_BUILTINS = frozenset(
  {
    "open",
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "input",
    "breakpoint",
    "help",
    "exit",
    "quit",
    "copyright",
    "credits",
    "license",
    "memoryview",
  }
)
# The only dunder names/attributes environment code may mention.
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__doc__", "__qualname__"})
# Non-dunder attributes that reach frames, code objects and tracebacks (and from there the
# worker's own globals): generators/coroutines, frames, tracebacks, code objects.
FRAME_ATTRIBUTES = frozenset(
  {
    "gi_frame",
    "gi_code",
    "gi_yieldfrom",
    "cr_frame",
    "cr_code",
    "cr_await",
    "cr_origin",
    "ag_frame",
    "ag_code",
    "ag_await",
    "tb_frame",
    "tb_next",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_code",
    "f_trace",
    "co_code",
    "co_consts",
    "co_names",
  }
)
REQUIRED_METHODS = {"reset": 2, "step": 2, "solution": 1}  # positional args incl. self
TOOL_REQUIRED_METHODS = {"reset": 2, "solution": 1}  # a ToolEnv subclass; step is ToolEnv's
TOOL_MODULE, TOOL_BASE = "tool_env", "ToolEnv"
KINDS = ("game", "tool")
MAX_SOURCE_CHARS = 200_000


def is_dunder(name: str) -> bool:
  return len(name) > 4 and name.startswith("__") and name.endswith("__")


def forbidden_attribute(name: str) -> bool:
  """True for attribute names environment code may not read through any object."""
  if name in FRAME_ATTRIBUTES:
    return True
  return is_dunder(name) and name not in ALLOWED_DUNDERS


def import_allowed(name: str) -> bool:
  return name in ALLOWED_MODULES or name in ALLOWED_SUBMODULES


@dataclass(frozen=True)
class StaticIssue:
  """The first reason a source is rejected before it runs; `line` is 1-based (0 if none)."""

  reason: str
  line: int = 0

  def __str__(self) -> str:
    return f"{self.reason} (line {self.line})" if self.line else self.reason


def _chain_root(node: ast.AST) -> str | None:
  """Leftmost name of an attribute/subscript chain such as `random.Random.x[0]`."""
  while isinstance(node, ast.Attribute | ast.Subscript):
    node = node.value
  return node.id if isinstance(node, ast.Name) else None


def _store_targets(node: ast.AST) -> list[ast.AST]:
  if isinstance(node, ast.Assign):
    targets = list(node.targets)
  elif isinstance(node, ast.AugAssign | ast.AnnAssign):
    targets = [node.target]
  elif isinstance(node, ast.Delete):
    targets = list(node.targets)
  else:
    return []
  out = []
  while targets:
    t = targets.pop()
    if isinstance(t, ast.Tuple | ast.List):
      targets.extend(t.elts)
    elif isinstance(t, ast.Starred):
      targets.append(t.value)
    else:
      out.append(t)
  return out


def _format_fields(template: str) -> list[str]:
  try:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]
  except ValueError:
    return []


def _format_walks_forbidden(field: str) -> bool:
  """True if a `str.format` field such as `0.__class__` or `x.gi_frame` walks a bad attribute."""
  parts = field.replace("[", ".").replace("]", "").split(".")[1:]
  return any(p.startswith("_") or forbidden_attribute(p) for p in parts)


def _arity_issue(fn: ast.FunctionDef | ast.AsyncFunctionDef, npos: int) -> str | None:
  """Whether `fn` can be called with exactly `npos` positional arguments (self included)."""
  if isinstance(fn, ast.AsyncFunctionDef):
    return f"method {fn.name}() must not be async"
  a = fn.args
  params = len(a.posonlyargs) + len(a.args)
  required = params - len(a.defaults)
  kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
  if kw_required:
    return f"method {fn.name}() has required keyword-only arguments {kw_required}"
  if npos < required or (npos > params and a.vararg is None):
    want = {1: "(self)", 2: "(self, seed)" if fn.name == "reset" else "(self, action)"}[npos]
    return f"method {fn.name}() must be callable as {fn.name}{want}"
  return None


def _class_methods(
  cls: ast.ClassDef, classes: dict[str, ast.ClassDef]
) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
  """Methods of `cls` including those inherited from classes defined in the same module."""
  methods: dict = {}
  seen, order = set(), [cls]
  while order:
    c = order.pop(0)
    if c.name in seen:
      continue
    seen.add(c.name)
    for item in c.body:
      if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
        methods.setdefault(item.name, item)
    order.extend(classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes)
  return methods


def _check_node(node: ast.AST, imported: set[str]) -> str | None:
  """Policy check of one node; returns a reason or None."""
  if isinstance(node, ast.Import):
    for alias in node.names:
      if not import_allowed(alias.name):
        return f"import of module '{alias.name}' is not allowed (allowed: {_allowed_list()})"
  elif isinstance(node, ast.ImportFrom):
    if node.level:
      return "relative imports are not allowed"
    if not import_allowed(node.module or ""):
      return f"import from module '{node.module}' is not allowed (allowed: {_allowed_list()})"
    if any(alias.name == "*" for alias in node.names):
      return "'from ... import *' is not allowed"
    for alias in node.names:
      if alias.name.startswith("_") and node.module != "__future__":
        return f"importing private name '{alias.name}' is not allowed"
  elif isinstance(node, ast.Name):
    if node.id in FORBIDDEN_BUILTINS:
      return f"use of '{node.id}' is not allowed"
    if is_dunder(node.id) and node.id not in ALLOWED_DUNDERS:
      return f"use of name '{node.id}' is not allowed"
  elif isinstance(node, ast.Attribute):
    if forbidden_attribute(node.attr):
      return f"access to attribute '{node.attr}' is not allowed"
    if (
      node.attr.startswith("_")
      and not is_dunder(node.attr)
      and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ):
      return f"access to private attribute '{node.attr}' of anything but self is not allowed"
  elif isinstance(node, ast.Call):
    f = node.func
    if isinstance(f, ast.Name) and f.id in ("getattr", "setattr", "delattr", "hasattr"):
      if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
        name = node.args[1].value
        if isinstance(name, str) and forbidden_attribute(name):
          return f"{f.id}() of attribute '{name}' is not allowed"
    if (
      isinstance(f, ast.Attribute)
      and f.attr in ("format", "format_map")
      and isinstance(f.value, ast.Constant)
      and isinstance(f.value.value, str)
    ):
      for field in _format_fields(f.value.value):
        if _format_walks_forbidden(field):
          return f"format field '{{{field}}}' walks a forbidden attribute"
  for target in _store_targets(node):
    if isinstance(target, ast.Attribute | ast.Subscript):
      root = _chain_root(target)
      if root in imported:
        return f"modifying imported module object '{root}' is not allowed"
  return None


def _allowed_list() -> str:
  return ", ".join(sorted(m for m in ALLOWED_MODULES if m != "__future__"))


def parse_source(source: str) -> tuple[ast.Module | None, StaticIssue | None]:
  """Parse without executing; syntax errors and pathological nesting become issues."""
  if len(source) > MAX_SOURCE_CHARS:
    return None, StaticIssue(f"source has {len(source)} characters (limit {MAX_SOURCE_CHARS})")
  try:
    return ast.parse(source, filename="<env>"), None
  except SyntaxError as e:
    return None, StaticIssue(f"syntax error: {e.msg}", e.lineno or 0)
  except (RecursionError, MemoryError, ValueError) as e:
    return None, StaticIssue(f"source cannot be parsed: {type(e).__name__}")


def _tool_base_refs(tree: ast.Module) -> tuple[set[str], set[str]]:
  """(names bound to tool_env.ToolEnv, names bound to the tool_env module) by imports."""
  names, modules = set(), set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == TOOL_MODULE and not node.level:
      names.update(a.asname or a.name for a in node.names if a.name == TOOL_BASE)
    elif isinstance(node, ast.Import):
      modules.update(a.asname or a.name for a in node.names if a.name == TOOL_MODULE)
  return names, modules


def _is_tool_class(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], tree: ast.Module) -> bool:
  """Whether `cls` subclasses ToolEnv, directly or through classes of the same module."""
  names, modules = _tool_base_refs(tree)
  seen, order = set(), [cls]
  while order:
    c = order.pop(0)
    if c.name in seen:
      continue
    seen.add(c.name)
    for b in c.bases:
      if isinstance(b, ast.Name) and b.id in names:
        return True
      if (
        isinstance(b, ast.Attribute)
        and b.attr == TOOL_BASE
        and isinstance(b.value, ast.Name)
        and b.value.id in modules
      ):
        return True
      if isinstance(b, ast.Name) and b.id in classes:
        order.append(classes[b.id])
  return False


def _env_classes(tree: ast.Module) -> tuple[dict[str, ast.ClassDef], list[ast.ClassDef]]:
  classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
  return classes, [c for name, c in classes.items() if name.endswith("Env")]


def _tree_kind(tree: ast.Module) -> str:
  classes, envs = _env_classes(tree)
  return "tool" if len(envs) == 1 and _is_tool_class(envs[0], classes, tree) else "game"


def source_kind(source: str) -> str:
  """ "tool" when the source's one `*Env` class subclasses ToolEnv (directly or through classes
  defined in the same module), else "game" (also for sources that do not parse). Nothing runs."""
  tree, issue = parse_source(source)
  return "game" if issue is not None else _tree_kind(tree)


def check_source(source: str) -> tuple[StaticIssue | None, str | None]:
  """Static stage: returns (first issue or None, the `*Env` class name or None)."""
  issue, class_name, _ = check_source_kind(source)
  return issue, class_name


def _shape_issue(tree: ast.Module, kind: str) -> tuple[StaticIssue | None, str | None]:
  """The class-shape rules: exactly one `*Env` class with the kind's methods and arities."""
  classes, envs = _env_classes(tree)
  if len(envs) != 1:
    names = ", ".join(c.name for c in envs) or "none"
    return StaticIssue(f"expected exactly one class whose name ends in 'Env', found {names}"), None
  env = envs[0]
  methods = _class_methods(env, classes)
  if kind == "tool" and "step" in methods:
    return StaticIssue(
      f"tool environment class {env.name} must not override step(): ToolEnv runs the tool-call "
      "protocol (define tool_<name> methods instead)",
      methods["step"].lineno,
    ), None
  required = TOOL_REQUIRED_METHODS if kind == "tool" else REQUIRED_METHODS
  for name, npos in required.items():
    if name not in methods:
      return StaticIssue(f"class {env.name} has no method {name}()", env.lineno), None
    why = _arity_issue(methods[name], npos)
    if why:
      return StaticIssue(why, methods[name].lineno), None
  if "__init__" in methods and (why := _arity_issue(methods["__init__"], 1)):
    return StaticIssue(
      why.replace("(self)", "() with no arguments"), methods["__init__"].lineno
    ), None
  return None, env.name


def check_source_kind(source: str) -> tuple[StaticIssue | None, str | None, str]:
  """Static stage with the kind: (first issue or None, the `*Env` class name or None, "game" or
  "tool"; see `source_kind`)."""
  tree, issue = parse_source(source)
  if issue is not None:
    return issue, None, "game"
  kind = _tree_kind(tree)
  imported: set[str] = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      imported.update((a.asname or a.name).partition(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      imported.update(a.asname or a.name for a in node.names)
  issues = []
  for node in ast.walk(tree):
    reason = _check_node(node, imported)
    if reason is not None:
      issues.append((getattr(node, "lineno", 0), getattr(node, "end_col_offset", 0), reason))
  if issues:  # the first in source order (ast.walk is breadth-first)
    line, _, reason = min(issues)
    return StaticIssue(reason, line), None, kind
  issue, class_name = _shape_issue(tree, kind)
  if issue is not None:
    return issue, None, kind
  try:
    compile(tree, "<env>", "exec", dont_inherit=True)  # compile-time errors; nothing runs
  except SyntaxError as e:
    return StaticIssue(f"syntax error: {e.msg}", e.lineno or 0), None, kind
  except (RecursionError, MemoryError, ValueError) as e:
    return StaticIssue(f"source cannot be compiled: {type(e).__name__}"), None, kind
  return None, class_name, kind
