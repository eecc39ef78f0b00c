"""Abstract values of the Python -> `EnvProgram` translator, with exact int32 range reasoning.

The lowering (`lower.py`) evaluates an environment's methods abstractly: a Python
value is either a *constant* (a plain Python object: int, bool, str, None, float, tuple,
range, dict -- known when the program is built, e.g. constructor arguments) or one of the
classes below, which stand for values only known at run time and name the virtual register
holding them. Every dynamic int carries a static range ``[lo, hi]`` (and, when small, its
exact value set): each operation computes its result range exactly and the lowering refuses
any result that may leave int32, so the interpreter's checked arithmetic can never overflow
where Python would not (Python ints are unbounded).
"""

from __future__ import annotations

import ast
import dataclasses
import itertools

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_VALUE_SET = 256  # exact value sets are tracked up to this size


class Refusal(Exception):
  """The source is outside the translatable subset: ``line N: <construct> ...``."""

  def __init__(self, msg: str, node: ast.AST | None = None):
    super().__init__(msg)
    self.msg = msg
    self.line = getattr(node, "lineno", None)

  def __str__(self) -> str:
    return f"line {self.line}: {self.msg}" if self.line else self.msg


def snippet(node: ast.AST, limit: int = 60) -> str:
  """Source text of ``node`` for messages (shortened)."""
  try:
    text = ast.unparse(node)
  except Exception:  # noqa: BLE001 - only for messages
    text = type(node).__name__
  return text if len(text) <= limit else text[: limit - 3] + "..."


_ids = itertools.count()


@dataclasses.dataclass(eq=False)
class VReg:
  """A virtual register: ``kind`` "s" (scalar) or "l" (list). ``name`` is set for the
  interpreter's read-only specials (``turn``, ``guess``, ``lguess`` ...), never allocated."""

  kind: str
  name: str | None = None
  id: int = dataclasses.field(default_factory=lambda: next(_ids))

  def __repr__(self) -> str:
    return self.name or f"{'v' if self.kind == 's' else 'L'}{self.id}"


TURN, MAXTURNS, FOUND, GUESS, NGUESS = (
  VReg("s", n) for n in ("turn", "maxturns", "found", "guess", "nguess")
)
LGUESS = VReg("l", "lguess")


@dataclasses.dataclass(eq=False)
class Int:
  """A run-time int (or bool when ``boolean``) in ``reg`` with range ``[lo, hi]``; ``vals``
  is its exact value set when small; ``sym`` tags comparisons of the turn counter
  (``("turn>=", M)``), used to prove the truncation rule."""

  reg: VReg
  lo: int
  hi: int
  boolean: bool = False
  vals: frozenset | None = None
  sym: tuple | None = None
  nonzero: bool = False  # proven non-zero (a divisor guarded by ``!= 0``)


@dataclasses.dataclass(eq=False)
class Lst:
  """A Python list (``mutable``) or tuple of ints with run-time contents. ``elems`` are the
  element values when known one by one; ``reg`` the list register holding it when
  materialised; ``length`` an int or an `Int` (the parsed answer's length)."""

  elems: list | None
  reg: VReg | None
  length: object
  lo: int
  hi: int
  mutable: bool = True


@dataclasses.dataclass(eq=False)
class Choice:
  """Text that depends on a run-time condition: ``a`` if ``cond`` else ``b``."""

  cond: Int
  a: Text
  b: Text


@dataclasses.dataclass(eq=False)
class Text:
  """A run-time string: items are literal ``str``, `Int` (decimal), `Lst` (``"a, b, c"``)
  or `Choice`."""

  items: list


# Opaque run-time objects the subset knows how to use.
@dataclasses.dataclass(eq=False)
class Answer:
  """``_boxed_ints(action)`` (the reference parser): None or the list of ints."""


@dataclasses.dataclass(eq=False)
class Matches:
  """``re.findall(<boxed pattern with g int groups>, action)``."""

  groups: int


@dataclasses.dataclass(eq=False)
class MatchObj:
  """``re.search(<boxed pattern>, action)``: a match object or None."""

  groups: int


@dataclasses.dataclass(eq=False)
class MatchTuple:
  groups: int


@dataclasses.dataclass(eq=False)
class MatchStr:
  """The text of int group ``k`` (0-based) of the answer; ``int()`` of it is the k-th int."""

  k: int


@dataclasses.dataclass(eq=False)
class Rng:
  """The ``random`` module or a ``random.Random`` instance."""


@dataclasses.dataclass(eq=False)
class Seed:
  """``reset``'s seed argument: only usable to seed an Rng."""


@dataclasses.dataclass(eq=False)
class ActionText:
  """``step``'s action argument: only usable by a recognised answer parser."""


@dataclasses.dataclass(frozen=True)
class Module:
  name: str


@dataclasses.dataclass(frozen=True)
class Builtin:
  name: str


@dataclasses.dataclass(eq=False)
class SelfRef:
  pass


@dataclasses.dataclass(eq=False)
class Function:
  """A function or method of the source, inlined at each call."""

  node: ast.FunctionDef
  method: bool


@dataclasses.dataclass(eq=False)
class Bound:
  """``obj.name`` for a method of a non-source object (``rng.randint``, ``lst.append``)."""

  obj: object
  name: str


@dataclasses.dataclass(eq=False)
class Pattern:
  """``re.compile(text)``."""

  text: str


@dataclasses.dataclass(eq=False)
class Undefined:
  """A name bound on only one side of a run-time ``if`` (or, with ``what``, a module-level
  object outside the subset such as a second class)."""

  line: int
  what: str = ""


DYNAMIC = (Int, Lst, Text)


def is_const(v) -> bool:
  return not isinstance(
    v,
    (Int, Lst, Text, Choice, Answer, Matches, MatchObj, MatchTuple, MatchStr, Rng, Seed)
    + (ActionText, Module, Builtin, SelfRef, Function, Bound, Pattern, Undefined),
  )


def const_int(v) -> bool:
  return type(v) in (int, bool)


# ------------------------------------------------------------------------- range arithmetic
def bounds(v) -> tuple[int, int, frozenset | None]:
  """(lo, hi, value set) of an `Int` or a constant int/bool."""
  if isinstance(v, Int):
    return v.lo, v.hi, v.vals
  return int(v), int(v), frozenset([int(v)])


def _sets(fn, a, b):
  if a is None or b is None or len(a) * len(b) > MAX_VALUE_SET:
    return None
  out = set()
  for x in a:
    for y in b:
      r = fn(x, y)
      if r is None:
        continue
      out.add(r)
  return frozenset(out) if out else None


def _corners(fn, a, b) -> tuple[int, int]:
  vals = [fn(x, y) for x in a for y in b]
  return min(vals), max(vals)


def _nonzero_parts(lo, hi, vals):
  """The divisor range split into its negative and positive parts (zero excluded)."""
  if vals is not None:
    vals = [v for v in vals if v]
    neg = [v for v in vals if v < 0]
    pos = [v for v in vals if v > 0]
    return [
      p for p in ((min(neg), max(neg)) if neg else None, (min(pos), max(pos)) if pos else None) if p
    ]
  parts = []
  if lo < 0:
    parts.append((lo, min(hi, -1)))
  if hi > 0:
    parts.append((max(lo, 1), hi))
  return parts


def binary_range(op: str, a, b) -> tuple[int, int, frozenset | None]:
  """Exact result range (and value set) of ``a op b`` with Python semantics. For ``//`` and
  ``%`` the divisor's zero is excluded (the caller proves it cannot be zero)."""
  alo, ahi, av = bounds(a)
  blo, bhi, bv = bounds(b)
  fns = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "min": min,
    "max": max,
    "div": lambda x, y: x // y if y else None,
    "mod": lambda x, y: x % y if y else None,
  }
  fn = fns[op]
  vals = _sets(fn, av, bv)
  if op in ("add", "sub", "mul", "min", "max"):
    lo, hi = _corners(fn, (alo, ahi), (blo, bhi))
  else:
    parts = _nonzero_parts(blo, bhi, bv)
    los, his = [], []
    for dlo, dhi in parts:
      if op == "div":
        lo, hi = _corners(fn, (alo, ahi), (dlo, dhi))
      elif dlo > 0:
        lo, hi = 0, dhi - 1
        if alo >= 0 and ahi < dlo:  # x % d == x
          lo, hi = alo, ahi
      else:
        lo, hi = dlo + 1, 0
      los.append(lo)
      his.append(hi)
    lo, hi = min(los), max(his)
  if vals is not None:
    lo, hi = max(lo, min(vals)), min(hi, max(vals))
  return lo, hi, vals


def unary_range(op: str, a) -> tuple[int, int, frozenset | None]:
  lo, hi, vals = bounds(a)
  if op == "neg":
    return -hi, -lo, frozenset(-v for v in vals) if vals is not None else None
  # abs
  if lo >= 0:
    return lo, hi, vals
  if hi <= 0:
    return -hi, -lo, frozenset(-v for v in vals) if vals is not None else None
  return 0, max(-lo, hi), frozenset(abs(v) for v in vals) if vals is not None else None


def union(a, b) -> tuple[int, int, frozenset | None]:
  alo, ahi, av = bounds(a)
  blo, bhi, bv = bounds(b)
  vals = av | bv if av is not None and bv is not None and len(av | bv) <= MAX_VALUE_SET else None
  return min(alo, blo), max(ahi, bhi), vals


def fits(lo: int, hi: int) -> bool:
  return INT32_MIN <= lo and hi <= INT32_MAX


def may_be_zero(v) -> bool:
  if isinstance(v, Int) and v.nonzero:
    return False
  lo, hi, vals = bounds(v)
  return (0 in vals) if vals is not None else lo <= 0 <= hi
