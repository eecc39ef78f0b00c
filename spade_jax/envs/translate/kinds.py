"""Translator: the typed values the lowering visitor computes with.

Compile-time values are plain Python objects (int, bool, float, str, None, tuple). Run-time
values name registers: `Int` (an int or bool), `Milli` (a float held in thousandths, e.g. a
reward), `Lst` (an int list), `texts.Text`. `Var` is a Python variable or attribute that holds
run-time values assigned on several paths. The rest describe objects the environment calls:
the random module or a `random.Random`, the step's action text and what ``re`` makes of it,
functions and bound methods.
"""

from __future__ import annotations

import ast
import dataclasses


@dataclasses.dataclass(frozen=True)
class Int:
  reg: str
  boolean: bool = False


@dataclasses.dataclass(frozen=True)
class MaybeInt:
  """An int or None (a helper that returns None on some paths): ``present`` is 1 when it holds
  an int."""

  reg: str
  present: str


@dataclasses.dataclass(frozen=True)
class Milli:
  reg: str


@dataclasses.dataclass(frozen=True)
class Lst:
  reg: str
  length: int | None = None  # known at compile time (never changed after it was built)


@dataclasses.dataclass(frozen=True)
class AnswerInts(Lst):
  """What the library's ``_boxed_ints(action)`` returns: the device parser's own answer (the
  ints of the last box, ``lguess``; None -- no answer -- when not ``found``)."""

  reg: str = "lguess"


@dataclasses.dataclass(frozen=True)
class BoxedIntsParser:
  """The library twins' ``_boxed_ints`` (recognised by its exact source)."""


@dataclasses.dataclass
class Var:
  """A mutable slot: ``kind`` "int" | "milli" | "list" | "text" | "const"; ``ref`` the
  register, the `TextVar` or (for "const") the constant value."""

  kind: str
  ref: object
  boolean: bool = False
  length: int | None = None  # a list's compile-time length (attributes assigned once only)


class It(tuple):
  """An iteration the visitor lowers as a loop: ("range", lo, hi, step), ("list", reg),
  ("const", values), ("digits", reg), ("enumerate", It), ("zip", It, It)."""


class ListLit(tuple):
  """A list display of constants (``[1, 2, 3]``): constant while only read; a run-time list
  once stored in a variable or attribute (Python lists are shared and mutable)."""


@dataclasses.dataclass(frozen=True)
class Range:
  """``range(lo, hi, step)`` with run-time (or large constant) bounds; ``step`` constant."""

  lo: object
  hi: object
  step: int


@dataclasses.dataclass(frozen=True)
class Rng:
  pass


@dataclasses.dataclass(frozen=True)
class Module:
  name: str


@dataclasses.dataclass(frozen=True)
class Builtin:
  name: str


@dataclasses.dataclass(frozen=True)
class Pattern:
  text: str


@dataclasses.dataclass(frozen=True)
class ActionText:
  """The step's action (only ``re`` may read it)."""


@dataclasses.dataclass(frozen=True)
class Match:
  """``re.search`` (first) or ``re.findall`` (a list of groups) of a recognised pattern."""

  grammar: int
  many: bool  # findall
  groups: int = 1  # > 1: a comma list of ints (grammar 0, the device's int list)
  lo: int | None = None  # an approximate grammar's value range (`answers.approximate_grammar`)
  hi: int | None = None
  test: str = "found"  # the special its truth reads ("nguess": an int was found in the box)


@dataclasses.dataclass(frozen=True)
class Group:
  grammar: int
  last: bool
  index: int = 0  # which int of a comma-list match


@dataclasses.dataclass(frozen=True)
class Digits:
  """A character of ``str(n)`` for an int ``n >= 0`` (``int(c)`` gives the digit)."""

  value: Int


@dataclasses.dataclass(frozen=True)
class Func:
  node: ast.FunctionDef
  bound: bool  # a method of the environment (self is passed)


@dataclasses.dataclass(frozen=True)
class Method:
  obj: object
  name: str
  target: ast.AST | None  # the object's expression (for mutation of attributes)


@dataclasses.dataclass(frozen=True)
class SelfRef:
  pass


@dataclasses.dataclass(frozen=True)
class ConstDict:
  """A dict display with constant keys (values may be run-time): read by key only."""

  keys: tuple
  values: tuple


@dataclasses.dataclass(frozen=True)
class Seed:
  """reset()'s seed argument: only passed to ``random.seed`` / ``random.Random``."""


@dataclasses.dataclass(frozen=True)
class Info:
  """The ``{}`` info dict of reset / step."""


CONST_TYPES = (int, bool, float, str, type(None), tuple)


def is_const(v) -> bool:
  if isinstance(v, tuple):
    return all(is_const(x) for x in v)
  return isinstance(v, CONST_TYPES)
