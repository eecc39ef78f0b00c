"""Virtual-register code for the translator: builder, dead-code removal, register allocation and
assembly text (`assembly.py` then builds and verifies the `EnvProgram`).

The lowering emits straight-line code over virtual registers (`VReg`), mostly in SSA form: each
scalar register is written once; a list built element by element (``clear`` then ``push``es)
is written by a run of read-modify-write instructions. State that outlives a call (``self.x``
read by ``step``, the solution) lives in *home* registers with a fixed physical register:
``reset`` ends by writing each home; ``step`` reads a home's incoming value (`Section.live_in`)
and, when the attribute changes, writes the home again. Copies into homes are coalesced away
when the incoming value is dead by then.

Allocation is interval based: a register is busy from the instruction that writes it to its
last read (templates and case predicates read at the end of the section, homes are live out).
An instruction may write the register it reads last, since operands are read before the
result is written.
"""

from __future__ import annotations

import dataclasses
import json

from spade_jax.envs.ir.program import OPS, ProgramConfig
from spade_jax.envs.translate.values import Refusal, VReg

DRAW_OPS = frozenset({"rand", "choice", "shuffle", "sample"})
RMW_OPS = frozenset({"push", "lset"})  # read their destination list
CSE_OPS = frozenset(n for n in OPS if n not in DRAW_OPS | RMW_OPS | {"clear", "nop"})


@dataclasses.dataclass(frozen=True)
class TableRef:
  index: int


class Tables:
  """Constant int tables shared by both sections (deduplicated)."""

  def __init__(self, cfg: ProgramConfig):
    self.cfg, self.values = cfg, []

  def ref(self, values, node=None) -> TableRef:
    values = tuple(int(v) for v in values)
    if not 1 <= len(values) <= self.cfg.list_len:
      raise Refusal(f"a constant list of {len(values)} values does not fit a table", node)
    if values not in self.values:
      if len(self.values) == self.cfg.n_tables:
        raise Refusal(f"needs more than {self.cfg.n_tables} constant tables", node)
      self.values.append(values)
    return TableRef(self.values.index(values))


class Code:
  """Instructions of one section (``reset`` or ``step``) with common-subexpression reuse."""

  def __init__(self, tables: Tables):
    self.tables = tables
    self.ins: list[list] = []  # [op, dst, args]
    self._cse: dict = {}

  @staticmethod
  def _key(a):
    return ("r", a.id) if isinstance(a, VReg) else a

  def emit(self, op: str, dst: VReg, *args) -> VReg:
    assert op in OPS and op != "nop", op
    if op in CSE_OPS:
      key = (op, tuple(self._key(a) for a in args))
      hit = self._cse.get(key)
      if hit is not None:
        return hit
      self._cse[key] = dst
    self.ins.append([op, dst, list(args)])
    return dst

  def scalar(self, op: str, *args) -> VReg:
    return self.emit(op, VReg("s"), *args)

  def listop(self, op: str, *args) -> VReg:
    return self.emit(op, VReg("l"), *args)


@dataclasses.dataclass
class Section:
  """A section ready for allocation: code, what is read at its end (``templates``: lists of
  text and registers; ``preds``: case predicates), final home writes ``{home: value}`` and
  incoming home values ``{vreg: home}``."""

  code: Code
  templates: list
  home_out: dict
  live_in: dict = dataclasses.field(default_factory=dict)
  preds: list = dataclasses.field(default_factory=list)

  @property
  def end_uses(self) -> list:
    items = [x for t in self.templates for x in t] + list(self.preds)
    return [x for x in items if isinstance(x, VReg)]


def _reads(ins) -> list[VReg]:
  op, dst, args = ins
  out = [a for a in args if isinstance(a, VReg) and a.name is None]
  if op in RMW_OPS:
    out.append(dst)
  return out


def _rename(sec: Section, old: VReg, new: VReg) -> None:
  for ins in sec.code.ins:
    if ins[1] is old:
      ins[1] = new
    ins[2] = [new if a is old else a for a in ins[2]]
  sec.templates = [[new if a is old else a for a in t] for t in sec.templates]
  sec.preds = [new if a is old else a for a in sec.preds]


def _prepare(sec: Section) -> None:
  """Home writes as copies, coalescing, dead-code removal, copies of long-lived inputs."""
  ins = sec.code.ins
  defined = {i[1]: p for p, i in reversed(list(enumerate(ins)))}
  incoming = {h: v for v, h in sec.live_in.items()}
  claimed = set()
  for home, value in sec.home_out.items():
    if value is home or value is incoming.get(home):
      continue
    if isinstance(value, VReg) and value in defined and value not in claimed:
      if value not in sec.live_in and value.name is None:
        p = defined[value]
        h_in = incoming.get(home)
        later = [q for q, i in enumerate(ins) if q > p and h_in in _reads(i)]
        if h_in is None or (not later and h_in not in sec.end_uses):
          claimed.add(value)
          _rename(sec, value, home)
          continue
    if isinstance(value, VReg):
      ins.append(["copy" if home.kind == "l" else "set", home, [value]])
    else:
      ins.append(["set", home, [int(value)]])
  # Dead code: keep draws, home writes and what they (transitively) read.
  needed = set(a for a in sec.end_uses if isinstance(a, VReg)) | set(sec.home_out)
  keep = []
  for i in reversed(ins):
    if i[0] in DRAW_OPS or i[1] in needed:
      keep.append(i)
      needed.update(_reads(i))
  sec.code.ins = ins = keep[::-1]
  # An incoming value still read after its home is rewritten is copied first.
  for v, home in list(sec.live_in.items()):
    writes = [p for p, i in enumerate(ins) if i[1] is home]
    if not writes:
      continue
    reads = [p for p, i in enumerate(ins) if v in _reads(i)] + (
      [len(ins)] if v in sec.end_uses else []
    )
    if any(r > writes[0] for r in reads):
      tmp = VReg(v.kind)
      _rename(sec, v, tmp)
      ins.insert(0, ["copy" if v.kind == "l" else "set", tmp, [v]])


def _intervals(sec: Section) -> dict[VReg, list[int]]:
  ins, end = sec.code.ins, len(sec.code.ins)
  span: dict[VReg, list[int]] = {v: [-1, -1] for v in sec.live_in}
  for p, (op, dst, args) in enumerate(ins):
    for r in _reads([op, dst, args]):
      span.setdefault(r, [p, p])[1] = p
    if dst.name is None and dst not in span:
      span[dst] = [p, p]
  for r in sec.end_uses:
    if isinstance(r, VReg) and r.name is None:
      span.setdefault(r, [end, end])[1] = end
  for h in sec.home_out:
    if h in span:
      span[h][1] = end + 1
  written = {i[1] for i in ins}
  for v, h in sec.live_in.items():
    if h not in written:
      span[v][1] = end + 1  # unchanged: the incoming value is the outgoing one
  return span


def allocate(sec: Section, pinned: dict[VReg, int], cfg: ProgramConfig, what: str) -> dict:
  """Physical register of every virtual register of the section (homes pinned)."""
  _prepare(sec)
  span = _intervals(sec)
  limits = {"s": cfg.n_regs, "l": cfg.n_lists}
  busy: dict[tuple[str, int], list] = {}
  phys: dict[VReg, int] = {}

  def free(kind, k, lo, hi) -> bool:
    return all(not (lo < e and b < hi) and lo != b for b, e in busy.get((kind, k), []))

  for v, home in sec.live_in.items():
    phys[v] = pinned[home]
  for v in pinned:
    phys[v] = pinned[v]
  for v in sorted(span, key=lambda v: (v not in phys, span[v][0])):
    lo, hi = span[v]
    if v in phys:
      if not free(v.kind, phys[v], lo, hi):  # pinned values never overlap (see _prepare)
        raise AssertionError(f"{what}: home register conflict for {v}")
      busy.setdefault((v.kind, phys[v]), []).append((lo, hi))
      continue
    for k in range(limits[v.kind]):
      if free(v.kind, k, lo, hi):
        phys[v] = k
        busy.setdefault((v.kind, k), []).append((lo, hi))
        break
    else:
      unit = "scalar registers" if v.kind == "s" else "list registers"
      raise Refusal(f"{what} needs more than {limits[v.kind]} {unit}")
  return phys


def operand(a, phys: dict) -> str:
  if isinstance(a, VReg):
    if a.name is not None:
      return a.name
    return f"{'r' if a.kind == 's' else 'l'}{phys[a]}"
  if isinstance(a, TableRef):
    return f"t{a.index}"
  return str(int(a))


def section_text(sec: Section, phys: dict, name: str, drop_fresh_clears: bool) -> list[str]:
  """Assembly lines of a section; in ``reset`` a ``clear`` of a list register not yet written
  is dropped (lists start empty)."""
  lines, written = [name], set()
  for op, dst, args in sec.code.ins:
    d = operand(dst, phys)
    if op == "clear" and drop_fresh_clears and d not in written:
      continue
    written.add(d)
    lines.append(" ".join([op, d] + [operand(a, phys) for a in args]))
  return lines


def template_text(items, phys: dict) -> str:
  """A template as assembly words: JSON strings and register names."""
  words = []
  for it in items:
    if isinstance(it, str):
      if it:
        words.append(json.dumps(it, ensure_ascii=False))
    else:
      words.append(operand(it, phys))
  return " ".join(words)
