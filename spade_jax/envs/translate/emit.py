"""Translator back end: instructions with labels, registers and tables -> assembly text.

One `Emitter` serves a whole environment. Code goes into a *section* (``reset`` or ``step``);
jumps name labels (`new_label` / `place`), which the assembler resolves. Registers come from
one scalar file and one list file, each split in two:

* *homes* hold state that outlives a call (``self.x``, the solution, text selectors): they are
  allocated from the top of the file down and never freed;
* *locals and temporaries* are allocated from the bottom up with a free list: a temporary dies
  at the end of the statement that made it (`statement`), a local (a Python variable, a value a
  template shows) is pinned until the section ends.

`check_fits` refuses when the two halves meet. Constant int tables are shared by both sections.
"""

from __future__ import annotations

import contextlib
import json

from spade_jax.envs.ir.program import ProgramConfig
from spade_jax.envs.translate.refusal import Refusal


class RegFile:
  """One register file (scalar ``r`` or list ``l``): homes from the top, others from below."""

  def __init__(self, prefix: str, size: int):
    self.prefix, self.size = prefix, size
    self.n_homes = 0
    self.used: set[int] = set()  # non-home registers in use
    self.high = 0  # most non-home registers in use at once (over all sections)

  def home(self) -> str:
    self.n_homes += 1
    return f"{self.prefix}{self.size - self.n_homes}"

  def take(self) -> str:
    i = 0
    while i in self.used:
      i += 1
    self.used.add(i)
    self.high = max(self.high, i + 1)
    return f"{self.prefix}{i}"

  def free(self, name: str) -> None:
    self.used.discard(int(name[len(self.prefix) :]))

  def fits(self) -> bool:
    return self.high + self.n_homes <= self.size


class Emitter:
  def __init__(self, cfg: ProgramConfig):
    self.cfg = cfg
    self.regs = RegFile("r", cfg.n_regs)
    self.lists = RegFile("l", cfg.n_lists)
    self.code: dict[str, list[str]] = {"reset": [], "step": []}
    self.section = "reset"
    self.tables: list[tuple[int, ...]] = []
    self._labels = 0
    self._temps: list[list[str]] | None = None

  # ------------------------------------------------------------------------------ sections
  def begin(self, section: str) -> None:
    self.section = section
    for f in (self.regs, self.lists):
      f.used.clear()

  def emit(self, op: str, *args) -> None:
    self.code[self.section].append(" ".join([op, *(str(a) for a in args)]))

  def exit_unless_less(self, a, b, label: str) -> None:
    """Jump to ``label`` unless ``a < b`` (a loop's test; its temporary dies here)."""
    with self.statement():
      c = self.temp()
      self.emit("lt", c, a, b)
      self.emit("jz", c, label)

  def new_label(self) -> str:
    self._labels += 1
    return f"@L{self._labels}"

  def place(self, label: str) -> None:
    self.code[self.section].append(label)

  def n_instructions(self, section: str) -> int:
    return sum(1 for line in self.code[section] if not line.startswith("@"))

  # ----------------------------------------------------------------------------- registers
  @contextlib.contextmanager
  def statement(self):
    """Temporaries taken inside die at the end (unless pinned)."""
    outer, self._temps = self._temps, []
    try:
      yield
    finally:
      for name in self._temps:
        (self.lists if name.startswith("l") else self.regs).free(name)
      self._temps = outer

  def temp(self) -> str:
    r = self.regs.take()
    if self._temps is not None:
      self._temps.append(r)
    return r

  def temp_list(self) -> str:
    r = self.lists.take()
    if self._temps is not None:
      self._temps.append(r)
    return r

  def pin(self, name: str) -> str:
    """Keeps a temporary alive to the end of the section."""
    for scope in [self._temps] if self._temps is not None else []:
      if name in scope:
        scope.remove(name)
    return name

  def local(self) -> str:
    return self.pin(self.temp())

  def local_list(self) -> str:
    return self.pin(self.temp_list())

  def is_temp(self, name: str) -> bool:
    return self._temps is not None and name in self._temps

  def table(self, values, node=None) -> str:
    values = tuple(int(v) for v in values)
    if not 1 <= len(values) <= self.cfg.list_len:
      raise Refusal(f"a constant list of {len(values)} values does not fit a table", node)
    if values not in self.tables:
      if len(self.tables) == self.cfg.n_tables:
        raise Refusal(f"needs more than {self.cfg.n_tables} constant tables", node)
      self.tables.append(values)
    return f"t{self.tables.index(values)}"

  def check_fits(self) -> None:
    for f, what in ((self.regs, "scalar"), (self.lists, "list")):
      if not f.fits():
        raise Refusal(f"needs {f.high + f.n_homes} {what} registers, the interpreter has {f.size}")
    for section, limit in (("reset", self.cfg.n_reset), ("step", self.cfg.n_step)):
      n = self.n_instructions(section)
      if n > limit:
        raise Refusal(f"{section} lowers to {n} instructions, the interpreter holds {limit}")

  # ---------------------------------------------------------------------------------- text
  def section_text(self) -> list[str]:
    out = [f"table {t} " + " ".join(str(v) for v in vals) for t, vals in self._tables()]
    for section in ("reset", "step"):
      out.append(section)
      out += self.code[section]
    return out

  def _tables(self):
    return [(f"t{i}", v) for i, v in enumerate(self.tables)]


def template_line(head: str, items) -> str:
  """``head`` then a template's items: strings as JSON literals, registers by name."""
  words = [head]
  for it in items:
    words.append(json.dumps(it, ensure_ascii=False) if isinstance(it, str) else str(it.name))
  return " ".join(words)
