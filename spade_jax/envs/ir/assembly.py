"""The EnvProgram assembly language: `assemble(text, tokenizer)` (`disassembly.disassemble` is
its inverse).

One statement per line, every opcode and operand a separate word, ``#`` starts a comment.
Sections come in a fixed order (a regular grammar, so a token mask can enforce it)::

  turns 7                         # max_turns
  table t0 2 3 5 7                # constant int tables (optional)
  reset                           # reset code: OP DST SRC...
  rand r0 1 100
  step                            # step code, runs after the answer is loaded
  eq r1 guess r0
  lt r2 guess r0
  not r3 found
  ge r4 turn maxturns
  answer r0                       # the solution (scalar or list register)
  parse signed first              # optional answer mode (default: the last box's int list)
  obssel r5                       # optional: which obs line is the observation (default 0)
  obs "Guess my number between 1 and 100. Answer as \\boxed{N}."
  obs "Alternative observation 1"  # further obs lines: alternatives 1, 2 .. (cfg.n_obs)
  hint "Halve the interval each turn."           # optional
  case r1 1000 stop "Correct!"    # case PRED REWARD stop|go|trunc TEMPLATE: first match wins
  case r4 0 go "Out of turns. It was " r0 "."
  case r3 0 go "Put your answer in \\boxed{}."
  case r2 0 go "Too low."
  case 1 0 go "Too high."

Operands: integers, scalar registers ``r0..`` and the read-only ``turn maxturns found guess
nguess``, list registers ``l0..`` and the read-only ``lguess``, tables ``t0..``. Templates are
JSON string literals and register names (a list renders as ``"a, b, c"``). Rewards are in
thousandths. Opcodes (signatures in `program.OPS`; ``d`` destination, ``a b c`` scalars,
``L M`` lists or tables, Python semantics, int32-checked)::

  set d a | add/sub/mul d a b | div/mod d a b (floor, Python sign) | neg/abs d a | min/max d a b
  eq/ne/lt/le/gt/ge d a b (0/1) | and/or d a b, not d a (0/1) | sel d a b c (b if a else c)
  gcd d a b (math.gcd) | rand d a b (randint) | choice d L
  len/sum/lmin/lmax d L | argmin/argmax d L (first index) | count/find/get d L a
    (L.count(a) / L.index(a) / L[a]) | match d L M (equal positions) | leq d L M (L == M)
  dot d L M (sum of products) | lset l a b (l[a] = b) | push l a | clear l | copy l L
  sort/rev l L | take l L a (L[:a]) | shuffle l L | sample l L a | range l a b | digits l a
  rsample l a b k (random.sample(range(a, b), k)) | jmp T | jz a T (if a == 0) | jnz a T

Jumps: ``T`` is an instruction index of the same section (0-based; the number of
instructions ends the call) or a label: a line ``@name`` in the reset or step code names the
index of the next instruction (labels are local to their section; forward references work).
`disassemble` prints numeric targets.

``parse GRAMMAR first|last`` (optional, after ``answer``; sets ``answer_mode``) makes the step
see one int: the first / last ``\\boxed{...}`` whose content matches GRAMMAR, as Python's
``re.search`` / ``re.findall(...)[-1]`` would (see `parse`): ``signed`` ``-?\\d+``, ``digits``
``\\d+``, ``signed_ws`` ``\\s*-?\\d+\\s*``, ``digits_ws`` ``\\s*\\d+\\s*``. ``box`` is
``re.search(r"\\\\boxed\\{([^}]*)\\}", ...)`` then ``int(group.strip())``: ``found`` says a
box exists, ``nguess`` is 1 (``guess`` the int) only when the content is an int. Without it the
answer is the int list of the last box (an invalid last box is no answer).

Every error names the line and the problem. `disassemble` prints the canonical form, which assembles back to the
identical program.
"""

from __future__ import annotations

import json
import re

import numpy as np

from spade_jax.envs.ir.checks import CHECKS, ProgramError, check_program
from spade_jax.envs.ir.parse import GRAMMAR_NAMES
from spade_jax.envs.ir.program import (
  ANSWER_INT,
  ANSWER_LIST,
  DEFAULT_CONFIG,
  INT32_MAX,
  INT32_MIN,
  MODE_IMM,
  MODE_LIST,
  MODE_REG,
  MODE_TABLE,
  OPCODE,
  OPS,
  REWARD_SCALE,
  SPECIALS,
  TPL_CASE0,
  TPL_HINT,
  TPL_SOLUTION,
  EnvProgram,
  ProgramConfig,
  empty_program,
  program_from_arrays,
)
from spade_jax.envs.ir.text import (
  TemplateError,
  compile_template,
  tokenizer_constants,
)

_WORD = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s"]+|"')
_INT = re.compile(r"-?[0-9]+")


_LABEL = re.compile(r"@[A-Za-z_][A-Za-z0-9_]*")
ANSWER_ORDER = ("first", "last")  # answer_mode[1]
_KEYWORDS = ("turns", "table", "reset", "step", "answer", "parse", "obssel", "obs", "hint", "case")
# Grammar: stage -> {statement: next stage}; instructions are allowed in reset/step.
_NEXT = {
  "start": {"turns": "turns"},
  "turns": {"table": "turns", "reset": "reset"},
  "reset": {"step": "step"},
  "step": {"answer": "answer"},
  "answer": {"parse": "parse", "obssel": "obssel", "obs": "obs"},
  "parse": {"obssel": "obssel", "obs": "obs"},
  "obssel": {"obs": "obs"},
  "obs": {"obs": "obs", "hint": "hint", "case": "case"},
  "hint": {"case": "case"},
  "case": {"case": "case"},
}
_EXPECT = {
  k: [repr(h) for h in v] + (["an instruction"] if k in ("reset", "step") else [])
  for k, v in _NEXT.items()
}

OUTCOMES = ("go", "stop", "trunc")  # a case's stop flag 0, 1, 2


class AssemblyError(ValueError):
  """A malformed program text; the message starts with ``line N:``."""


class Line:
  """One non-empty source line: its 1-based number and its words (comments dropped)."""

  def __init__(self, number: int, words: list[str]):
    self.number, self.words = number, words

  def error(self, msg: str) -> AssemblyError:
    return AssemblyError(f"line {self.number}: {msg}")


def split_lines(text: str) -> list[Line]:
  """The program text's non-empty lines, split into words (string literals kept whole)."""
  lines = []
  for number, raw in enumerate(text.splitlines(), 1):
    words = []
    for m in _WORD.finditer(raw):
      w = m.group()
      if w.startswith("#"):
        break
      if w == '"':
        raise AssemblyError(f"line {number}: unterminated string literal")
      words.append(w)
    if words:
      lines.append(Line(number, words))
  return lines


class _Assembler:
  def __init__(self, cfg: ProgramConfig, tokenizer):
    self.cfg, self.tok = cfg, tokenizer
    self.arr = empty_program(cfg)
    self.arr.update(tokenizer_constants(tokenizer, cfg))
    self.rows: dict[str, list[int]] = {"reset": [], "step": [], "case": []}
    self.template_lines: dict[int, int] = {}
    self.labels: dict[str, int] = {}  # labels of the current section -> instruction index
    self.fixups: list[tuple] = []  # (line, section, row, column, label) to resolve
    self.n_obs = 0

  # -------------------------------------------------------------------------- operands
  def int_word(self, line, w, lo=INT32_MIN, hi=INT32_MAX) -> int:
    if not _INT.fullmatch(w):
      raise line.error(f"expected an integer, got {w!r}")
    v = int(w)
    if not lo <= v <= hi:
      raise line.error(f"integer {v} out of range [{lo}, {hi}]")
    return v

  def scalar_reg(self, line, w, writable: bool) -> int | None:
    cfg = self.cfg
    if w in SPECIALS:
      if writable:
        raise line.error(f"register {w!r} is read-only")
      return cfg.n_regs + SPECIALS.index(w)
    if re.fullmatch(r"r[0-9]+", w):
      i = int(w[1:])
      if i >= cfg.n_regs:
        raise line.error(f"register {w} out of range (r0..r{cfg.n_regs - 1})")
      return i
    return None

  def list_reg(self, line, w, writable: bool) -> int | None:
    cfg = self.cfg
    if w == "lguess":
      if writable:
        raise line.error("list register 'lguess' is read-only")
      return cfg.n_lists
    if re.fullmatch(r"l[0-9]+", w):
      i = int(w[1:])
      if i >= cfg.n_lists:
        raise line.error(f"list register {w} out of range (l0..l{cfg.n_lists - 1})")
      return i
    return None

  def scalar_src(self, line, w) -> tuple[int, int]:
    if _INT.fullmatch(w):
      return MODE_IMM, self.int_word(line, w)
    r = self.scalar_reg(line, w, writable=False)
    if r is None:
      raise line.error(f"expected an integer or a scalar register, got {w!r}")
    return MODE_REG, r

  def list_src(self, line, w) -> tuple[int, int]:
    r = self.list_reg(line, w, writable=False)
    if r is not None:
      return MODE_LIST, r
    if re.fullmatch(r"t[0-9]+", w):
      i = int(w[1:])
      if i >= self.cfg.n_tables:
        raise line.error(f"table {w} out of range (t0..t{self.cfg.n_tables - 1})")
      return MODE_TABLE, i
    raise line.error(f"expected a list register or a table, got {w!r}")

  def target(self, line, w, section: str, row: int, column: int) -> tuple[int, int]:
    if _INT.fullmatch(w):
      return MODE_IMM, self.int_word(line, w)
    if not _LABEL.fullmatch(w):
      raise line.error(f"expected a jump target (an instruction index or @label), got {w!r}")
    self.fixups.append((line, section, row, column, w))
    return MODE_IMM, 0

  def label(self, line, section: str):
    w = line.words[0]
    if len(line.words) != 1 or not _LABEL.fullmatch(w):
      raise line.error(f"expected a label '@name' alone on its line, got {' '.join(line.words)!r}")
    if w in self.labels:
      raise line.error(f"label {w} defined twice in the {section} code")
    self.labels[w] = len(self.rows[section])

  def end_section(self):
    """Resolves the jump targets of the section just finished (labels are per section)."""
    for line, section, row, column, name in self.fixups:
      if name not in self.labels:
        raise line.error(f"unknown label {name} (labels are local to the {section} code)")
      self.arr[f"{section}_code"][row, column] = self.labels[name]
    self.labels, self.fixups = {}, []

  # ------------------------------------------------------------------------ statements
  def table(self, line):
    if len(line.words) < 2 or not re.fullmatch(r"t[0-9]+", line.words[1]):
      raise line.error("expected 'table tK v1 v2 ...'")
    i = int(line.words[1][1:])
    if i >= self.cfg.n_tables:
      raise line.error(f"table {line.words[1]} out of range (t0..t{self.cfg.n_tables - 1})")
    if self.arr["table_len"][i]:
      raise line.error(f"table {line.words[1]} defined twice")
    vals = [self.int_word(line, w) for w in line.words[2:]]
    if not vals or len(vals) > self.cfg.list_len:
      raise line.error(f"a table holds 1..{self.cfg.list_len} values, got {len(vals)}")
    self.arr["tables"][i, : len(vals)] = vals
    self.arr["table_len"][i] = len(vals)

  def instruction(self, line, section: str):
    name = line.words[0]
    if name not in OPS or name == "nop":
      raise line.error(f"unknown opcode {name!r}")
    dst_kind, arg_kinds = OPS[name]
    sig = ([{"r": "DST-REG", "l": "DST-LIST"}[dst_kind]] if dst_kind != "-" else []) + [
      {"S": "SCALAR", "L": "LIST", "T": "TARGET"}[k] for k in arg_kinds
    ]
    if len(line.words) - 1 != len(sig):
      raise line.error(
        f"{name} takes {len(sig)} operands ({' '.join(sig)}), got {len(line.words) - 1}"
      )
    code = self.arr[f"{section}_code"]
    n = len(self.rows[section])
    if n == code.shape[0]:
      raise line.error(f"more than {code.shape[0]} {section} instructions")
    row = np.zeros(8, np.int32)
    row[0] = OPCODE[name]
    words = line.words[1:]
    if dst_kind != "-":
      w = words.pop(0)
      d = (self.scalar_reg if dst_kind == "r" else self.list_reg)(line, w, writable=True)
      if d is None:
        raise line.error(
          f"{name} writes a {'scalar' if dst_kind == 'r' else 'list'} register, got {w!r}"
        )
      row[1] = d
    for j, (kind, w) in enumerate(zip(arg_kinds, words)):
      if kind == "T":
        row[2 + 2 * j : 4 + 2 * j] = self.target(line, w, section, n, 3 + 2 * j)
      else:
        row[2 + 2 * j : 4 + 2 * j] = (self.scalar_src if kind == "S" else self.list_src)(line, w)
    if name == "rand" and row[2] == row[4] == MODE_IMM and row[3] > row[5]:
      raise line.error(f"rand range is empty ({row[3]} > {row[5]})")
    code[n] = row
    self.rows[section].append(line.number)

  def items(self, line, words) -> list:
    out = []
    for w in words:
      if w.startswith('"'):
        try:
          s = json.loads(w)
        except json.JSONDecodeError as e:
          raise line.error(f"bad string literal {w} ({e.msg})") from None
        out.append(("text", s))
        continue
      r = self.scalar_reg(line, w, writable=False)
      if r is not None:
        out.append(("reg", r))
        continue
      r = self.list_reg(line, w, writable=False)
      if r is None:
        raise line.error(f"template items are strings or registers, got {w!r}")
      out.append(("list", r))
    return out

  def template(self, line, t: int, items: list):
    try:
      tpl = compile_template(items, self.tok, self.cfg, self.arr)
    except TemplateError as e:
      raise line.error(str(e)) from None
    for key, field in (
      ("ids", "tpl_ids"),
      ("len", "tpl_len"),
      ("slots", "tpl_slots"),
      ("tail", "tpl_tail"),
      ("tail_len", "tpl_tail_len"),
    ):
      self.arr[field][t] = tpl[key]
    self.template_lines[t] = line.number

  def answer(self, line):
    if len(line.words) != 2:
      raise line.error("expected 'answer rK' or 'answer lK'")
    w = line.words[1]
    r = self.scalar_reg(line, w, writable=True) if w.startswith("r") else None
    if r is not None:
      self.arr["answer"][:] = (ANSWER_INT, r)
      ref = ("reg", r)
    else:
      r = self.list_reg(line, w, writable=True) if w.startswith("l") else None
      if r is None:
        raise line.error(f"answer must be a general register r0.. or l0.., got {w!r}")
      self.arr["answer"][:] = (ANSWER_LIST, r)
      ref = ("list", r)
    self.template(line, TPL_SOLUTION, [("text", "\\boxed{"), ref, ("text", "}")])

  def parse_mode(self, line):
    names = GRAMMAR_NAMES[1:]
    if len(line.words) != 3 or line.words[1] not in names or line.words[2] not in ANSWER_ORDER:
      raise line.error(f"expected 'parse {'|'.join(names)} first|last'")
    self.arr["answer_mode"][:] = (
      GRAMMAR_NAMES.index(line.words[1]),
      ANSWER_ORDER.index(line.words[2]),
    )

  def case(self, line):
    if len(line.words) < 5:
      raise line.error("expected 'case PRED REWARD stop|go|trunc TEMPLATE...'")
    i = len(self.rows["case"])
    if i == self.cfg.n_cases:
      raise line.error(f"more than {self.cfg.n_cases} cases")
    pred = self.scalar_src(line, line.words[1])
    reward = self.scalar_src(line, line.words[2])
    if reward[0] == MODE_IMM and abs(reward[1]) > REWARD_SCALE:
      raise line.error(
        f"reward {reward[1]} outside [-{REWARD_SCALE}, {REWARD_SCALE}] (thousandths)"
      )
    if line.words[3] not in OUTCOMES:
      raise line.error(f"expected 'stop', 'go' or 'trunc', got {line.words[3]!r}")
    self.arr["cases"][i] = (*pred, *reward, OUTCOMES.index(line.words[3]))
    self.rows["case"].append(line.number)
    self.template(line, TPL_CASE0 + i, self.items(line, line.words[4:]))

  # --------------------------------------------------------------------------- program
  def run(self, text: str) -> EnvProgram:
    lines = split_lines(text)
    stage = "start"
    for line in lines:
      head = line.words[0]
      nxt = _NEXT[stage].get(head)
      if nxt is None and stage in ("reset", "step") and head not in _KEYWORDS:
        if head.startswith("@"):
          self.label(line, stage)
        else:
          self.instruction(line, stage)
        continue
      if nxt is None:
        raise line.error(f"expected {' or '.join(_EXPECT[stage])}, got {head!r}")
      if stage in ("reset", "step"):
        self.end_section()
      stage = nxt
      if head == "turns":
        if len(line.words) != 2:
          raise line.error("expected 'turns N'")
        self.arr["max_turns"][()] = self.int_word(line, line.words[1], 1, self.cfg.max_turns_cap)
      elif head == "table":
        self.table(line)
      elif head in ("reset", "step"):
        if len(line.words) != 1:
          raise line.error(f"'{head}' stands alone on its line")
      elif head == "answer":
        self.answer(line)
      elif head == "parse":
        self.parse_mode(line)
      elif head == "obssel":
        if len(line.words) != 2:
          raise line.error("expected 'obssel OPERAND' (an integer or a scalar register)")
        self.arr["obs_select"][:] = self.scalar_src(line, line.words[1])
      elif head == "obs":
        items = self.items(line, line.words[1:])
        if not items:
          raise line.error("the observation template is empty")
        if self.n_obs == self.cfg.n_obs:
          raise line.error(f"more than {self.cfg.n_obs} observation templates (config n_obs)")
        self.template(line, self.cfg.obs_template(self.n_obs), items)
        self.n_obs += 1
      elif head == "hint":
        self.template(line, TPL_HINT, self.items(line, line.words[1:]))
      else:
        self.case(line)
    last = lines[-1].number if lines else 0
    if stage not in ("case",):
      raise AssemblyError(
        f"line {last}: program ends early: expected {' or '.join(_EXPECT[stage])}"
      )
    self.arr["n_cases"][()] = len(self.rows["case"])
    program = program_from_arrays(self.arr)
    code, where = check_program(program, self.cfg, np, self.tok.vocab_size)
    if int(code):
      raise AssemblyError(
        f"line {self._line_for(int(code), int(where), last)}: "
        + CHECKS[int(code)].format(where=int(where))
      )
    return program

  def _line_for(self, code: int, where: int, last: int) -> int:
    msg = CHECKS[code]
    for prefix, rows in (
      ("reset", self.rows["reset"]),
      ("step", self.rows["step"]),
      ("case", self.rows["case"]),
    ):
      if msg.startswith(prefix) and where < len(rows):
        return rows[where]
    if msg.startswith("template") and where in self.template_lines:
      return self.template_lines[where]
    return last


def assemble(text: str, tokenizer, cfg: ProgramConfig = DEFAULT_CONFIG) -> EnvProgram:
  """Program text -> `EnvProgram` (templates tokenised and verified for ``tokenizer``).
  Raises `AssemblyError` ("line N: reason") on any problem."""
  try:
    return _Assembler(cfg, tokenizer).run(text)
  except ProgramError as e:  # pragma: no cover - the assembler reports these itself
    raise AssemblyError(str(e)) from None


# ----------------------------------------------------------------------------- disassembly
