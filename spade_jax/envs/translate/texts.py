"""Translator: text as a typed value -- a choice among templates.

A `Text` is a list of *alternatives* (each a tuple of items: literal strings and `Slot`s, a
register shown as a decimal int or a list register shown as ``a, b, c``) and a selector
register saying which alternative holds (None when there is only one). Concatenation is the
product of the alternatives, its selector ``a.sel * len(b) + b.sel``; a local or an attribute
assigned different texts on different paths is one text whose alternatives are the union
(`TextVar`). The templates are built from the alternatives at the end (`observation`,
`feedback`), when every alternative is known.
"""

from __future__ import annotations

import dataclasses

from spade_jax.envs.translate.refusal import Refusal

MAX_ALTERNATIVES = 64


@dataclasses.dataclass(frozen=True)
class Slot:
  name: str  # "rN" (int) or "lN" (list)

  @property
  def is_list(self) -> bool:
    return self.name.startswith("l")


@dataclasses.dataclass
class Text:
  alts: list  # [tuple[str | Slot, ...]]
  sel: str | int | None = None  # register (or constant index) choosing the alternative
  origin: object = None  # the `TextVar` this value was read from

  @staticmethod
  def of(*items) -> Text:
    return Text([_norm(items)])

  @property
  def constant(self) -> str | None:
    if len(self.alts) == 1 and all(isinstance(i, str) for i in self.alts[0]):
      return "".join(self.alts[0])
    return None

  def slots(self) -> list[Slot]:
    return [i for alt in self.alts for i in alt if isinstance(i, Slot)]


def _norm(items) -> tuple:
  out: list = []
  for it in items:
    if isinstance(it, str):
      if not it:
        continue
      if out and isinstance(out[-1], str):
        out[-1] += it
        continue
    out.append(it)
  return tuple(out)


def selector(t: Text) -> str | int:
  """The selector as an operand (0 when there is one alternative)."""
  return 0 if t.sel is None else t.sel


def concat(a: Text, b: Text, e, node=None) -> Text:
  """``a + b``; ``e`` (the `Emitter`) computes the product selector."""
  alts = [_norm(x + y) for x in a.alts for y in b.alts]
  if len(alts) > MAX_ALTERNATIVES:
    raise Refusal(f"text with more than {MAX_ALTERNATIVES} alternatives", node)
  if len(b.alts) == 1:
    return Text(alts, a.sel)
  if len(a.alts) == 1:
    return Text(alts, b.sel)
  s = e.temp()
  e.emit("mul", s, a.sel, len(b.alts))
  e.emit("add", s, s, b.sel)
  return Text(alts, s)


def select(cond, a: Text, b: Text, e, node=None) -> Text:
  """``a if cond else b`` (``cond`` a register)."""
  alts = list(a.alts) + list(b.alts)
  if len(alts) > MAX_ALTERNATIVES:
    raise Refusal(f"text with more than {MAX_ALTERNATIVES} alternatives", node)
  s = e.temp()
  e.emit("add", s, selector(b), len(a.alts))
  e.emit("sel", s, cond, selector(a), s)
  return Text(alts, s)


class TextVar:
  """A text local or attribute: one selector register, alternatives added per assignment.

  ``chain`` is the visitor's region chain (`visitor.Visitor.regions`) where the variable was
  last assigned unconditionally: an assignment in that region or an enclosing one replaces the
  alternatives (nothing assigned before can still be read after it), one in a nested region
  adds to them. Attributes (``home``) always add: another call may read the old ones."""

  def __init__(self, sel: str, chain: tuple = (), home: bool = False):
    self.sel = sel
    self.alts: list = []
    self.chain, self.home = chain, home
    # (first, end, outcomes): alternatives first..end-1 were assigned together with a step
    # outcome in `outcomes` (0 go, 1 terminated, 2 truncated); see lowering.cases
    self.outcomes: list[tuple[int, int, tuple[int, ...]]] = []

  def assign(self, t: Text, e, chain: tuple = ()) -> None:
    if not self.home and self.alts and chain == self.chain[: len(chain)]:
      self.alts = []
    if not self.home and chain == self.chain[: len(chain)]:
      self.chain = chain
    offset = len(self.alts)
    self.alts.extend(t.alts)
    if len(self.alts) > MAX_ALTERNATIVES:
      raise Refusal(f"text with more than {MAX_ALTERNATIVES} alternatives")
    if t.sel is None:
      e.emit("set", self.sel, offset)
    else:
      e.emit("add", self.sel, t.sel, offset)

  def value(self) -> Text:
    return Text(self.alts, self.sel if len(self.alts) > 1 else None, self)
