"""spade_jax.tiny.analysis: command-line tools over recorded tiny runs, leaves of the package
(each tool's own behaviour is tested in test_tiny_trends.py, test_tiny_pool_families.py,
test_tiny_pool_overlap.py and, on a smoke run, test_tiny_train.py)."""

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "spade_jax"
ANALYSIS = PACKAGE / "tiny" / "analysis"
TOOLS = ("trends", "pool_families", "family_difficulty", "pool_overlap", "ablation")


def _imported(path: Path) -> set[str]:
  out = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      out.add(node.module)
      out.update(f"{node.module}.{a.name}" for a in node.names)
  return out


def test_nothing_outside_the_analysis_package_imports_it():
  users = [
    str(p.relative_to(REPO))
    for p in sorted(PACKAGE.rglob("*.py"))
    if ANALYSIS not in p.parents
    and any(m.startswith("spade_jax.tiny.analysis") for m in _imported(p))
  ]
  assert users == []


@pytest.mark.parametrize("name", TOOLS)
def test_each_tool_is_an_importable_command(name):
  mod = importlib.import_module(f"spade_jax.tiny.analysis.{name}")
  assert callable(mod.main) and f"python -m spade_jax.tiny.analysis.{name}" in mod.__doc__
  assert len(Path(mod.__file__).read_text().splitlines()) < 400
