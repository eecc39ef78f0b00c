"""The package's import rules (tests/layering.py): no cycles, no private cross-module imports,
dependencies pointing one way; modules stay short. The checker itself is tested on a small
package written to a temporary directory, so a rule that stopped detecting would fail here."""

from pathlib import Path

import layering
import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 500
# A cohesive visitor may be longer than MAX_LINES; each entry says why (none today).
LONG_OK: dict[str, str] = {}


def test_spade_jax_follows_the_import_rules():
  problems = layering.check(REPO, "spade_jax", layering.LAYERS)
  assert problems == [], "\n".join(problems)


def test_every_module_has_a_layer():
  mods = layering.module_names(REPO, "spade_jax")
  missing = [
    m for m in mods if m != "spade_jax" and layering.group(m, "spade_jax", layering.LAYERS) is None
  ]
  assert missing == []


def test_modules_are_short():
  long = {
    m: n for m, n in layering.long_modules(REPO, "spade_jax", MAX_LINES).items() if m not in LONG_OK
  }
  assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def _write(root: Path, files: dict[str, str]) -> None:
  for rel, text in files.items():
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


LAYERS = {"low": 0, "mid": 1, "high": 2}
CLEAN = {
  "pkg/__init__.py": "",
  "pkg/low.py": "def f():\n  return 1\n\n\ndef _helper():\n  return 2\n",
  "pkg/mid/__init__.py": "",
  "pkg/mid/a.py": "from pkg.low import f\nfrom pkg.mid import b\n",
  "pkg/mid/b.py": "from pkg import low\n",
  "pkg/high.py": "import pkg.mid.a\nfrom pkg.mid.b import low\n",
}


def test_checker_accepts_a_clean_package(tmp_path):
  _write(tmp_path, CLEAN)
  assert layering.check(tmp_path, "pkg", LAYERS) == []


@pytest.mark.parametrize(
  "change, expected",
  [
    # a cycle through a lazy import inside a function
    (
      {"pkg/mid/b.py": "def g():\n  from pkg.mid import a\n"},
      "import cycle: pkg.mid.a -> pkg.mid.b",
    ),
    # a private name imported from another module
    ({"pkg/mid/b.py": "from pkg.low import _helper\n"}, "uses private name '_helper' of pkg.low"),
    # ... or read through a module alias
    ({"pkg/mid/b.py": "from pkg import low\nx = low._helper()\n"}, "uses private name '_helper'"),
    # a relative import of a private name
    ({"pkg/mid/b.py": "from ..low import _helper\n"}, "uses private name '_helper' of pkg.low"),
    # a lower layer importing a higher one
    ({"pkg/low.py": "import pkg.high\n"}, "layer low (0) may not depend on high (2)"),
    # two groups of the same layer importing each other's way
    ({"pkg/side.py": "from pkg import mid\n"}, "pkg.side belongs to no layer"),
  ],
)
def test_checker_reports_each_violation(tmp_path, change, expected):
  _write(tmp_path, {**CLEAN, **change})
  problems = layering.check(tmp_path, "pkg", LAYERS)
  assert any(expected in p for p in problems), problems


def test_checker_refuses_an_import_within_one_layer_across_groups(tmp_path):
  _write(tmp_path, {**CLEAN, "pkg/other.py": "from pkg.mid import a\n"})
  problems = layering.check(tmp_path, "pkg", {**LAYERS, "other": 1})
  assert problems == ["pkg.other:1 imports pkg.mid.a: layer other (1) may not depend on mid (1)"]


def test_long_modules_are_found(tmp_path):
  _write(tmp_path, {**CLEAN, "pkg/big.py": "x = 1\n" * 12})
  assert layering.long_modules(tmp_path, "pkg", 10) == {"pkg.big": 12}
