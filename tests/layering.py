"""The package's import rules, checked by walking every module's AST (tests/test_layering.py).

* no import cycles among the package's modules (imports inside functions count too: a lazy
  import hides a cycle, it does not remove it);
* no private name (``_x``) imported from, or read as an attribute of, another module;
* dependencies point one way: every module belongs to a layer (`LAYERS`), and a module may
  import only from its own layer group or from a lower layer.

`check(root, package, layers)` returns the violations as lines, so the test of the checker can
run it on a small package written to a temporary directory.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

# Layer of each module-name prefix (longest prefix wins), lowest first. Within one group (the
# prefix that matched) imports are free; across groups they must go to a lower layer.
#   experiments -> {train, tiny} -> {eval, plan} -> {runner, spade} -> {rollout, rl} -> {envs, engine}
#   -> models -> sharding
LAYERS = {
  "sharding": 0,
  "multihost": 0,
  "xla_cpu": 0,
  "models": 1,
  "tokenizer": 2,
  "engine": 3,
  "trajectories": 3,
  "envs": 3,  # the package itself (empty __init__)
  "envs.ir": 3,
  "envs.sandbox": 3,
  "envs.check": 4,
  "envs.library": 4,
  "envs.translate": 5,
  "rollout": 6,
  "rl": 6,
  "checkpoint": 7,
  "metrics": 7,
  "plots": 7,
  "runner": 8,
  "spade": 8,
  "plan": 9,  # compiles the update and sampler of a `spade` config
  "eval": 9,  # suites reuse the agent prompts of `spade`; `train` runs them in-loop
  "train": 10,
  "tiny": 10,
}


@dataclasses.dataclass(frozen=True)
class Import:
  importer: str
  target: str  # a module of the package
  line: int
  private: str | None = None  # a private name taken from ``target``


def module_names(root: Path, package: str) -> dict[str, Path]:
  out = {}
  for path in sorted((root / package).rglob("*.py")):
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


def _owner(name: str, modules: dict) -> str | None:
  """The longest prefix of the dotted ``name`` that is a module of the package."""
  while name and name not in modules:
    name = name.rpartition(".")[0]
  return name or None


def imports(root: Path, package: str) -> list[Import]:
  modules = module_names(root, package)
  found = []
  for mod, path in modules.items():
    is_pkg = path.name == "__init__.py"
    aliases = {}  # local name -> module of the package it is bound to
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for a in node.names:
          target = _owner(a.name, modules)
          if target and target != mod:
            found.append(Import(mod, target, node.lineno))
            aliases[a.asname or a.name.split(".")[0]] = target if a.asname else package
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
          pkg = pkg[: len(pkg) - node.level + 1]
          base = ".".join(pkg + ([base] if base else []))
        for a in node.names:
          full = f"{base}.{a.name}"
          if full in modules:  # a submodule
            if full != mod:
              found.append(Import(mod, full, node.lineno))
              aliases[a.asname or a.name] = full
            continue
          target = _owner(base, modules)
          if target and target != mod:
            private = a.name if a.name.startswith("_") and not a.name.startswith("__") else None
            found.append(Import(mod, target, node.lineno, private))
    for node in ast.walk(tree):  # ``alias._private`` on an imported module
      if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
      ):
        target = aliases[node.value.id]
        sub = f"{target}.{node.attr}"
        if sub not in modules and target != mod:
          found.append(Import(mod, target, node.lineno, node.attr))
  return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one module (Tarjan, iterative)."""
  index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
  for start in sorted(edges):
    if start in index:
      continue
    work = [(start, iter(sorted(edges.get(start, ()))))]
    index[start] = low[start] = counter[0]
    counter[0] += 1
    stack.append(start)
    on.add(start)
    while work:
      v, it = work[-1]
      advanced = False
      for w in it:
        if w not in index:
          index[w] = low[w] = counter[0]
          counter[0] += 1
          stack.append(w)
          on.add(w)
          work.append((w, iter(sorted(edges.get(w, ())))))
          advanced = True
          break
        if w in on:
          low[v] = min(low[v], index[w])
      if advanced:
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[v])
      if low[v] == index[v]:
        comp = []
        while True:
          w = stack.pop()
          on.discard(w)
          comp.append(w)
          if w == v:
            break
        if len(comp) > 1:
          out.append(sorted(comp))
  return out


def group(module: str, package: str, layers: dict[str, int]) -> str | None:
  """The longest key of ``layers`` that prefixes ``module`` (without the package name)."""
  rel = module[len(package) + 1 :] if module != package else ""
  parts = rel.split(".") if rel else []
  for n in range(len(parts), 0, -1):
    key = ".".join(parts[:n])
    if key in layers:
      return key
  return None


def check(root: Path, package: str, layers: dict[str, int]) -> list[str]:
  """Every violation of the rules above, one line each (empty: the package is clean)."""
  found = imports(root, package)
  problems = []
  edges: dict[str, set[str]] = {}
  for imp in found:
    edges.setdefault(imp.importer, set()).add(imp.target)
    if imp.private:
      problems.append(
        f"{imp.importer}:{imp.line} uses private name {imp.private!r} of {imp.target}"
      )
  for comp in cycles(edges):
    problems.append("import cycle: " + " -> ".join(comp))
  for imp in found:
    a, b = group(imp.importer, package, layers), group(imp.target, package, layers)
    if a is None and imp.importer != package:
      problems.append(f"{imp.importer} belongs to no layer")
    if a is None or b is None or a == b:
      continue
    if layers[b] >= layers[a]:
      problems.append(
        f"{imp.importer}:{imp.line} imports {imp.target}: layer {a} ({layers[a]}) may not "
        f"depend on {b} ({layers[b]})"
      )
  return sorted(set(problems))


def long_modules(root: Path, package: str, limit: int) -> dict[str, int]:
  """Modules longer than ``limit`` lines."""
  out = {}
  for mod, path in module_names(root, package).items():
    n = len(path.read_text().splitlines())
    if n > limit:
      out[mod] = n
  return out
