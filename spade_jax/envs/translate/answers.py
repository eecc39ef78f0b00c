"""Translator: what a ``\\boxed{}`` regular expression means, decided by running it.

A pattern is matched against a fixed set of probe texts next to the device parser's single-int
grammars (`GRAMMARS`, see `ir/parse.py`): the pattern *is* grammar ``g`` when, on every probe,
both match or neither does and ``int()`` of the first group agrees. The probes cover signs,
whitespace, digit counts, lists, junk and empty boxes, and several boxes in one text (for the
first / last choice). Patterns that agree with no grammar are refused with their text.
"""

from __future__ import annotations

import ast
import functools
import os
import re

from spade_jax.envs.ir.parse import GRAMMARS as _DEVICE_GRAMMARS

# The device parser's single-int grammars: content between "\boxed{" and "}".
GRAMMARS = {g: _DEVICE_GRAMMARS[g].decode() for g in range(1, len(_DEVICE_GRAMMARS))}

_CONTENTS = (
  "5", "42", "-7", "007", " 12", "12 ", " -3 ", "+4", "1, 2", "x", "", "3x", "-", "123",
  "1234567", "- 5", "0", "99", "\t8",
)  # fmt: skip
_PROBES = tuple(
  [f"\\boxed{{{c}}}" for c in _CONTENTS]
  + [f"First \\boxed{{{a}}} then \\boxed{{{b}}}." for a, b in (("1", "2"), ("x", "3"), ("4", ""))]
  + ["no box", "\\boxed{5", "boxed{5}", "\\boxed{\\boxed{6}}", "The answer: \\boxed{ 9 }"]
)


_RANGES = ((None, None), (0, 9), (0, 1), (10, 99), (100, 999), (1000, 9999), (0, 99), (0, 999))
_SIMPLE = tuple(
  c for c in _CONTENTS + ("1", "9", "10", "100", "999", "1000", "12345", "-12")
  if "+" not in c and not (c.strip().lstrip("-").startswith("0") and len(c.strip().lstrip("-")) > 1)
)  # fmt: skip


def approximate_grammar(pattern: str) -> tuple[int, int | None, int | None] | None:
  """``(grammar, lo, hi)``: the pattern agrees with grammar ``g`` restricted to values in
  ``[lo, hi]`` on every single-box probe without a ``+`` sign or leading zeros (what ``\\d{3}``,
  ``[01]`` or ``[+-]?`` add). The device then matches the first/last box of grammar ``g`` and
  the step checks the range: it differs from Python on texts with several boxes where an
  earlier one is out of range, on ``+5`` and on leading zeros (`pipeline.APPROXIMATE_PARSE`)."""
  try:
    rx = re.compile(pattern)
  except re.error:
    return None
  if rx.groups != 1:
    return None
  boxes = [f"\\boxed{{{c}}}" for c in _SIMPLE]
  actual = [_int_of(rx.search(t)) for t in boxes]
  for g in (2, 4, 1, 3):  # unsigned first: closest for digit-count patterns
    ref = re.compile(GRAMMARS[g])
    for lo, hi in _RANGES:
      want = []
      for c in _SIMPLE:
        ok = ref.fullmatch(c) is not None
        v = int(c) if ok else None
        if ok and lo is not None and not lo <= v <= hi:
          v = None
        want.append(v)
      if want == actual:
        return g, lo, hi
  return None


def _int_of(m) -> int | None | str:
  if m is None:
    return None
  try:
    return int(m.group(1))
  except (ValueError, IndexError):
    return "not-an-int"


def grammar_of(pattern: str) -> int | None:
  """The grammar a ``\\boxed{}`` answer pattern equals on the probes, else None."""
  try:
    rx = re.compile(pattern)
  except re.error:
    return None
  if rx.groups < 1:
    return None
  for g, content in GRAMMARS.items():
    ref = re.compile(r"\\boxed\{(" + content + r")\}")
    if all(_int_of(rx.search(t)) == _int_of(ref.search(t)) for t in _PROBES) and all(
      [_int_of_s(s) for s in rx.findall(t)] == [_int_of_s(s) for s in ref.findall(t)]
      for t in _PROBES
    ):
      return g
  return None


_WS = r"(?:\\s\*|\\s\?| \*| \?)?"
_INT_GROUP = r"\((?:-\?|\\-\?|\[-\]\?)(?:\\d\+|\[0-9\]\+)\)"
_LIST_RE = re.compile(
  r"\\\\boxed\\?\{" + _WS + _INT_GROUP + "(?:" + _WS + "," + _WS + _INT_GROUP + ")+" + _WS
  + r"\\?\}"
)  # fmt: skip


BOX = 5  # the device grammar "box": any content up to the first "}" (`parse.GRAMMAR_NAMES`)
_BOX_REF = re.compile(r"\\boxed\{([^}]*)\}")


def is_box_pattern(pattern: str) -> bool:
  """The pattern captures a box's whole content (``([^}]*)`` and equivalents on the probes; a
  pattern that only differs on empty boxes or a ``{`` inside, like ``([^{}]+)``, too -- marked
  approximate): the device's "box" grammar; ``int()`` of the group succeeds where the content
  is an int."""
  try:
    rx = re.compile(pattern)
  except re.error:
    return False
  if rx.groups != 1:
    return False
  texts = [p for p in _PROBES if "{}" not in p and "\\boxed{\\boxed" not in p]
  texts += ["\\boxed{ 7 } and \\boxed{x}", "\\boxed{+3}"]
  for t in texts:
    a, b = rx.search(t), _BOX_REF.search(t)
    if (a is None) != (b is None) or (a is not None and a.group(1) != b.group(1)):
      return False
    if [g if isinstance(g, str) else g[0] for g in rx.findall(t)] != _BOX_REF.findall(t):
      return False
  return True


def list_groups(pattern: str) -> int | None:
  """``k >= 2`` for a ``\\boxed{a, b, ...}`` pattern of ``k`` signed int groups separated by
  commas (optional spaces), else None. Its matches are read from the device parser's int list
  (the last box; `pipeline.APPROXIMATE_PARSE` says where that differs)."""
  if not isinstance(pattern, str) or not _LIST_RE.fullmatch(pattern):
    return None
  return len(re.findall(_INT_GROUP, pattern))


def _int_of_s(s) -> int | str:
  s = s[0] if isinstance(s, tuple) else s
  try:
    return int(s)
  except ValueError:
    return "not-an-int"


@functools.cache
def reference_parser() -> tuple[str, dict]:
  """AST dump of the library twins' ``_boxed_ints`` and its two regex constants: a function
  with exactly this body (and these constants) *is* the device parser (`kinds.AnswerInts`)."""
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
  return function_dump(fn), consts


def function_dump(fn: ast.FunctionDef) -> str:
  return ast.dump(ast.FunctionDef(name="f", args=fn.args, body=fn.body, decorator_list=[]))
