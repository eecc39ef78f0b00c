"""Translator: ``step`` -> step code and feedback cases, with the truncation proof.

Each ``return`` of ``step`` is a case (predicate: the enclosing run-time conditions; first
true case wins, like Python's early returns); a return whose text depends on a run-time
condition becomes one case per alternative. Attributes kept in home registers get their final
value by ``sel`` over the cases in order. The lowering is repeated with the homes' ranges
widened by each step's results until they are stable or cover every turn of an episode, so an
attribute that would grow past int32 within ``max_turns`` steps is refused.

Truncation is structural in the interpreter (``turn >= max_turns`` and not terminated), so
every return must provably agree: terminating returns say ``truncated=False``; others return
``self.t >= M`` itself (``t`` the turn counter, ``M`` one constant), or ``True`` under exactly
that guard, or ``False`` after a return guarded by it.
"""

from __future__ import annotations

import dataclasses

from spade_jax.envs.translate.ir import Code, Section
from spade_jax.envs.translate.lower import Lowerer
from spade_jax.envs.translate.module import Frame
from spade_jax.envs.translate.values import (
  MAX_VALUE_SET,
  ActionText,
  Choice,
  Int,
  Lst,
  Refusal,
  SelfRef,
  Text,
  VReg,
  const_int,
  is_const,
)


@dataclasses.dataclass
class Home:
  """A register that carries a value from reset into step (and from step to step)."""

  reg: VReg  # the pinned home register
  entry: VReg  # the value as step reads it
  kind: str  # "int" or "list"
  lo: int
  hi: int
  vals: frozenset | None = None
  boolean: bool = False
  length: int = 0
  mutable: bool = True

  def value(self):
    if self.kind == "int":
      return Int(self.entry, self.lo, self.hi, self.boolean, self.vals)
    return Lst(None, self.entry, self.length, self.lo, self.hi, self.mutable)


class StepLowering(Lowerer):
  """``step`` and its cases."""

  # ------------------------------------------------------------------------------ step
  def lower_step_fixpoint(self, homes, entry):
    tables = list(self.tables.values)
    turns = None
    for it in range(self.cfg.max_turns_cap):
      self.tables.values = list(tables)
      cases, sec, finals, turns = self.lower_step(homes, entry)
      if not self.widen(homes, finals) or it + 2 > turns:
        break
      entry = {k: self.rewrap(v, homes) for k, v in entry.items()}
    return cases, sec, turns

  def rewrap(self, v, homes):
    for h in homes:
      if isinstance(v, Int | Lst) and v.reg is h.entry:
        return h.value()
    if isinstance(v, Text):
      return Text([self.rewrap(x, homes) for x in v.items])
    return v

  def widen(self, homes, finals) -> bool:
    changed = False
    for h in homes:
      v = finals.get(h.reg)
      if v is None or h.kind != "int" and not isinstance(v, Lst):
        continue
      lo, hi = (int(v), int(v)) if const_int(v) else (v.lo, v.hi)
      vals = frozenset([int(v)]) if const_int(v) else getattr(v, "vals", None)
      new_lo, new_hi = min(h.lo, lo), max(h.hi, hi)
      new_vals = h.vals | vals if h.vals is not None and vals is not None else None
      if new_vals is not None and len(new_vals) > MAX_VALUE_SET:
        new_vals = None
      if (new_lo, new_hi, new_vals) != (h.lo, h.hi, h.vals):
        h.lo, h.hi, h.vals, changed = new_lo, new_hi, new_vals, True
    return changed

  def lower_step(self, homes, entry):
    self.code, self.attrs = Code(self.tables), dict(entry)
    fdef = self.methods["step"]
    self.frames = [Frame("init", [{}])]
    scope = self.bind_params(fdef, [SelfRef(), ActionText()], {}, fdef)
    self.frames = [Frame("step", [scope])]
    self.cond, self.facts, self.returns = None, {}, []
    if not self.block(fdef.body):
      raise Refusal("step() may reach its end without returning", fdef)
    cases = self.returns
    turns = self.prove_truncation(cases, fdef)
    sec = Section(self.code, [], {}, {h.entry: h.reg for h in homes})
    finals = {}
    reads = self.step_reads()
    for attr, v0 in entry.items():
      if attr == self.counter:
        continue
      h = next((h for h in homes if isinstance(v0, Int | Lst) and v0.reg is h.entry), None)
      if h is None:
        if attr in reads:
          self.check_unchanged(attr, v0, cases)
        continue
      final = cases[-1].attrs.get(attr)
      for c in reversed(cases[:-1]):
        final = self.merge_final(c, c.attrs.get(attr), final, attr)
      finals[h.reg] = final
      if h.kind == "list" and not (isinstance(final, Lst) and final.length == h.length):
        raise Refusal(f"step() changes the length (or kind) of the list `self.{attr}`", fdef)
      if isinstance(final, Lst):
        sec.home_out[h.reg] = self.list_reg(final, fdef)
      elif isinstance(final, Int):
        sec.home_out[h.reg] = final.reg
      elif const_int(final):
        sec.home_out[h.reg] = int(final)
      else:
        raise Refusal(f"`self.{attr}` changes kind in step()", fdef)
    out = []
    for c in cases:
      for conds, items in _expand(c.text):
        pred = c.pred
        for ci, pol in conds:
          x = ci if pol else self.not_(ci, c.node)
          pred = x if pred is None else self.and_(pred, x, c.node)
        if pred is False:
          continue
        regs = [x if isinstance(x, str) else x.reg for x in items]
        out.append((pred if isinstance(pred, Int) else None, c.milli, c.stop, regs))
    if len(out) > self.cfg.n_cases:
      raise Refusal(
        f"step() needs {len(out)} feedback cases (the interpreter has {self.cfg.n_cases})", fdef
      )
    sec.preds = [p.reg if isinstance(p, Int) else None for p, *_ in out]
    sec.templates = [items for *_, items in out]
    return out, sec, finals, turns

  def merge_final(self, case, v, rest, attr):
    if v is rest:
      return v
    if (isinstance(v, Int) or const_int(v)) and (isinstance(rest, Int) or const_int(rest)):
      return v if case.pred is None else self.sel(case.pred, v, rest, case.node)
    if isinstance(v, Lst) and isinstance(rest, Lst) and v.reg is rest.reg and v.elems == rest.elems:
      return rest
    raise Refusal(f"`self.{attr}` is changed differently on different paths of step()", case.node)

  def check_unchanged(self, attr, v0, cases):
    for c in cases:
      v = c.attrs.get(attr)
      if v is not v0 and not (is_const(v) and is_const(v0) and v == v0 and type(v) is type(v0)):
        raise Refusal(
          f"step() changes `self.{attr}`, which is not an int or list kept in a register", c.node
        )

  def prove_truncation(self, cases, fdef) -> int:
    """The max_turns M such that every return's ``truncated`` is ``turn >= M`` (see module doc)."""
    ok_syms = lambda m: {("turn>=", m), ("turn==", m)}
    found = set()
    for c in cases:
      for v in (c.trunc, c.pred):
        if isinstance(v, Int) and v.sym and v.sym[0] in ("turn>=", "turn=="):
          found.add(v.sym[1])
    if self.counter is None:
      raise Refusal(
        "no turn counter found (`self.turn = 0` in reset(), `self.turn += 1` first in step())", fdef
      )
    if len(found) != 1:
      raise Refusal(
        "cannot find one turn limit: truncated must be `self.<counter> >= <constant max_turns>`",
        fdef,
      )
    (m,) = found
    if not 1 <= m <= self.cfg.max_turns_cap:
      raise Refusal(f"max_turns {m} is outside [1, {self.cfg.max_turns_cap}]", fdef)
    guarded = False
    for c in cases:
      pred_sym = c.pred.sym if isinstance(c.pred, Int) else None
      t = c.trunc
      if c.stop:
        ok = t is False
      elif t is True:
        ok = pred_sym in ok_syms(m)
      elif t is False:
        ok = guarded
      else:
        ok = isinstance(t, Int) and t.sym in ok_syms(m)
      if not ok:
        raise Refusal(
          f"cannot prove that this return's truncated flag equals `turn >= {m}` (the "
          "interpreter truncates structurally)",
          c.node,
        )
      guarded = guarded or pred_sym in ok_syms(m)
    return m


def _expand(text):
  """(conditions, items) for every alternative of a text with run-time choices."""
  if isinstance(text, str):
    return [([], [text])]
  out = [([], [])]
  for it in text.items:
    if isinstance(it, Choice):
      alts = [(conds + [(it.cond, True)], items) for conds, items in _expand(it.a)]
      alts += [(conds + [(it.cond, False)], items) for conds, items in _expand(it.b)]
      out = [(c0 + c1, i0 + i1) for c0, i0 in out for c1, i1 in alts]
    else:
      out = [(c, i + [it]) for c, i in out]
  return out
