"""`EnvProgram`: one environment as fixed-size int32 arrays, plus the checks every program passes.

A program is data for the interpreter (`interpreter.py`): register code (straight-line or
with jumps) for `reset` and for `step`, constant tables, a feedback *case table* and token templates. Every
size is a static `ProgramConfig` field, so all programs of one config share one compiled
interpreter and a batch of different programs vectorises with `vmap`.

Machine model (what the assembler, the translator and the tiny designer target):

* Scalar registers: ``r0..r{n_regs-1}`` (general, start at 0) followed by five read-only
  specials ``turn`` (steps taken, 1-based inside `step`), ``maxturns``, ``found`` (an answer
  was parsed), ``guess`` (its first int, 0 if none) and ``nguess`` (how many ints).
* List registers: ``l0..l{n_lists-1}`` (general, capacity ``list_len``) followed by the
  read-only ``lguess`` (the parsed answer as a list). Constant tables ``t0..`` are read-only
  lists stored in the program.
* The answer the specials hold is chosen by ``answer_mode`` (grammar, 0 first | 1 last): the
  default ``(0, 0)`` is the int list of the last ``\\boxed{}`` (invalid last box = none);
  grammars 1..4 take one int, the first / last box whose content matches ``-?\\d+``, ``\\d+``,
  ``\\s*-?\\d+\\s*`` or ``\\s*\\d+\\s*`` as Python's ``re.search`` / ``findall(...)[-1]``
  would (`parse.py`; ``nguess`` 1 and ``lguess`` ``[v]`` when found).
* Instructions ``(op, dst, amode, a, bmode, b, cmode, c)``; an operand is an immediate, a
  scalar register, a list register or a table (``MODE_*``). Arithmetic has Python semantics
  (floor ``//`` and ``%``, ``abs``/``min``/``max``, comparisons yielding 0/1) and is checked:
  any intermediate result outside int32 sets the sticky ``FAULT_OVERFLOW`` bit in the state
  (conservative w.r.t. Python's unbounded ints, which is what a translator needs to refuse).
  Python exceptions (zero division, bad index, empty choice ...) set other fault bits.
* Control flow: each code section runs from instruction 0 with a program counter; ``jmp T``,
  ``jz a T`` (if a == 0) and ``jnz a T`` (if a != 0) set it to ``T``, an immediate
  instruction index in ``[0, n]`` of the same section (``n`` = its non-nop instructions; a
  jump to ``n`` ends the call). A call ends when the pc reaches ``n`` or after
  ``ProgramConfig.max_exec`` instructions (then ``FAULT_CAPACITY``). Opcodes added after the
  straight-line set (``rsample``, the jumps) are appended to `OPS`; the tiny designer only
  knows `STRAIGHT_LINE_OPS`.
* After the step code runs, the first case ``(pred, reward, stop)`` whose predicate is
  non-zero picks the feedback template, the reward (in thousandths, so ``1000`` is 1.0) and
  the outcome: ``stop`` 0 goes on, 1 terminates, 2 truncates (an environment's own turn limit,
  computed by its step code). Truncation is also structural: ``turn >= max_turns`` and not
  terminated.
* Templates: literal token ids with number slots (scalar register as decimal, list as
  ``"a, b, c"``); see `text.py`. Template 0 is the observation, 1 the hint, 2 the solution
  (``\\boxed{answer}``), ``3 + i`` the text of case ``i``, and after the cases the
  alternative observations ``1 .. n_obs - 1`` (`ProgramConfig.obs_template`). ``obs_select``
  (mode, value) is an operand read after the reset code that picks the observation template
  (zeros: template 0; outside ``[0, n_obs)``: ``FAULT_INDEX`` and template 0).

The checks every program passes are `checks.check_program`.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from flax import struct

# Operand modes.
MODE_NONE, MODE_IMM, MODE_REG, MODE_LIST, MODE_TABLE = range(5)
# Template slot kinds.
SLOT_NONE, SLOT_INT, SLOT_LIST = range(3)
# Template indices.
TPL_OBS, TPL_HINT, TPL_SOLUTION, TPL_CASE0 = range(4)
# Answer kinds.
ANSWER_INT, ANSWER_LIST = 1, 2
SPECIALS = ("turn", "maxturns", "found", "guess", "nguess")
SPECIAL_TURN, SPECIAL_MAXTURNS, SPECIAL_FOUND, SPECIAL_GUESS, SPECIAL_NGUESS = range(5)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
REWARD_SCALE = 1000  # rewards are stored in thousandths

# Sticky fault bits (the interpreter ORs them into `EnvState.fault`).
FAULT_OVERFLOW = 1  # an int32 result overflowed
FAULT_ZERO_DIV = 2  # // or % by zero
FAULT_INDEX = 4  # bad index, value not in list, min/max of an empty list, bad sample size
FAULT_RANDOM = 8  # empty rand range or choice, or a replayed draw outside its range
FAULT_CAPACITY = 16  # a list, the draw log or the observation buffer overflowed
FAULT_REWARD = 32  # reward outside [-1, 1]
FAULT_NAMES = {
  FAULT_OVERFLOW: "int32 overflow",
  FAULT_ZERO_DIV: "division by zero",
  FAULT_INDEX: "index/value error",
  FAULT_RANDOM: "bad random draw",
  FAULT_CAPACITY: "capacity exceeded",
  FAULT_REWARD: "reward out of range",
}

# Opcodes: name -> (destination kind, operand kinds). Destination "r" = writable scalar
# register, "l" = writable list register, "-" = none. Operand "S" = scalar (immediate or
# register), "L" = list (list register or table), "T" = jump target (an immediate instruction
# index in the same section). The order fixes the opcode numbers: new opcodes are appended.
# fmt: off
_STRAIGHT_LINE: dict[str, tuple[str, str]] = {
  "nop": ("-", ""),
  "set": ("r", "S"), "add": ("r", "SS"), "sub": ("r", "SS"), "mul": ("r", "SS"),
  "div": ("r", "SS"), "mod": ("r", "SS"), "neg": ("r", "S"), "abs": ("r", "S"),
  "min": ("r", "SS"), "max": ("r", "SS"),
  "eq": ("r", "SS"), "ne": ("r", "SS"), "lt": ("r", "SS"), "le": ("r", "SS"),
  "gt": ("r", "SS"), "ge": ("r", "SS"),
  "and": ("r", "SS"), "or": ("r", "SS"), "not": ("r", "S"), "sel": ("r", "SSS"),
  "gcd": ("r", "SS"), "rand": ("r", "SS"), "choice": ("r", "L"),
  "len": ("r", "L"), "sum": ("r", "L"), "lmin": ("r", "L"), "lmax": ("r", "L"),
  "argmin": ("r", "L"), "argmax": ("r", "L"), "count": ("r", "LS"), "find": ("r", "LS"),
  "get": ("r", "LS"), "match": ("r", "LL"), "leq": ("r", "LL"), "dot": ("r", "LL"),
  "lset": ("l", "SS"), "push": ("l", "S"), "clear": ("l", ""), "copy": ("l", "L"),
  "sort": ("l", "L"), "rev": ("l", "L"), "take": ("l", "LS"), "shuffle": ("l", "L"),
  "sample": ("l", "LS"), "range": ("l", "SS"), "digits": ("l", "S"),
}
OPS: dict[str, tuple[str, str]] = {
  **_STRAIGHT_LINE,
  "rsample": ("l", "SSS"),
  "jmp": ("-", "T"), "jz": ("-", "ST"), "jnz": ("-", "ST"),
}
# fmt: on
# The opcodes before control flow and `rsample` were added (same numbers): the tiny designer's
# vocabulary and grammar are frozen to these.
STRAIGHT_LINE_OPS = tuple(_STRAIGHT_LINE)
JUMP_OPS = ("jmp", "jz", "jnz")
OP_NAMES = tuple(OPS)
OPCODE = {name: i for i, name in enumerate(OP_NAMES)}
N_OPS = len(OP_NAMES)
# Per-opcode signature tables (used by the checker): dst kind 0 none / 1 scalar / 2 list, and
DST_KIND = np.array([" rl".index(OPS[n][0].replace("-", " ")) for n in OP_NAMES], np.int32)
# per operand 0 unused / 1 scalar / 2 list / 3 jump target.
ARG_KIND = np.array([[" SLT".index(k) for k in OPS[n][1].ljust(3)] for n in OP_NAMES], np.int32)


@dataclasses.dataclass(frozen=True)
class ProgramConfig:
  """Static sizes shared by every program of one compiled interpreter."""

  n_regs: int = 32  # general scalar registers
  n_lists: int = 4  # general list registers
  list_len: int = 12  # capacity of every list, table and parsed answer list
  n_tables: int = 4
  n_reset: int = 48  # reset instructions
  n_step: int = 24  # step instructions
  n_cases: int = 8
  tpl_tokens: int = 160  # literal tokens per template
  tpl_slots: int = 8  # number slots per template
  tail_len: int = 4  # sign-variant tokens before a number / list separator tokens
  obs_len: int = 256  # rendered observation buffer
  feedback_len: int = 96  # longest step feedback (rendered into the first entries of obs_len)
  n_draws: int = 64  # random draws recorded per episode
  max_turns_cap: int = 32
  max_exec: int = 4096  # instructions executed per reset/step call (jumps can loop)
  n_obs: int = 1  # observation templates (0 is TPL_OBS; alternatives follow the cases)

  def __post_init__(self):
    if self.list_len < 10:
      raise ValueError("list_len must be >= 10 (digits of an int32)")
    if not 0 < self.feedback_len <= self.obs_len:
      raise ValueError("feedback_len must be in [1, obs_len]")
    if self.max_exec < 1 or self.n_obs < 1:
      raise ValueError("max_exec and n_obs must be >= 1")

  @property
  def n_regfile(self) -> int:
    return self.n_regs + len(SPECIALS)

  @property
  def n_listfile(self) -> int:  # general lists + lguess
    return self.n_lists + 1

  @property
  def n_templates(self) -> int:
    return TPL_CASE0 + self.n_cases + self.n_obs - 1

  def obs_template(self, j: int) -> int:
    """Template index of observation alternative ``j`` (0 = `TPL_OBS`)."""
    return TPL_OBS if j == 0 else TPL_CASE0 + self.n_cases + j - 1


# What translated environments and the on-device rollout use: room for lowered Python (loops,
# locals, texts chosen among templates, (feedback, outcome) cases). `ProgramConfig()` is the
# small straight-line machine.
DEFAULT_CONFIG = ProgramConfig(
  n_regs=96,
  n_lists=8,
  n_tables=8,
  n_reset=256,
  n_step=256,
  n_cases=24,
  tpl_slots=16,
  n_obs=8,
  max_exec=32768,
)


@struct.dataclass
class EnvProgram:
  """One environment. All fields are int32 arrays; shapes are fixed by `ProgramConfig`."""

  reset_code: jnp.ndarray  # [n_reset, 8] (op, dst, amode, a, bmode, b, cmode, c)
  step_code: jnp.ndarray  # [n_step, 8]
  tables: jnp.ndarray  # [n_tables, list_len]
  table_len: jnp.ndarray  # [n_tables]
  cases: jnp.ndarray  # [n_cases, 5] (pred mode, pred, reward mode, reward, stop)
  n_cases: jnp.ndarray  # []
  max_turns: jnp.ndarray  # []
  answer: jnp.ndarray  # [2] (ANSWER_INT | ANSWER_LIST, register index)
  # [2] (grammar, 0 first | 1 last): which parsed answer the step sees (`parse.select_answer`);
  # grammar 0 = the last box's int list (mode 0), 1..4 = a single int (`parse.GRAMMARS`),
  # 5 = ``box``: any box content, ``found`` = a box, ``nguess`` 1 when int() accepts it.
  answer_mode: jnp.ndarray
  tpl_ids: jnp.ndarray  # [n_templates, tpl_tokens] literal token ids
  tpl_len: jnp.ndarray  # [n_templates]
  # Slots: (kind, register, insert position, drop before if negative, drop before / after
  # if an empty list); tails: the tokens inserted instead (variant 0 negative, 1 empty list).
  tpl_slots: jnp.ndarray  # [n_templates, tpl_slots, 6]
  tpl_tail: jnp.ndarray  # [n_templates, tpl_slots, 2, tail_len]
  tpl_tail_len: jnp.ndarray  # [n_templates, tpl_slots, 2]
  digit_ids: jnp.ndarray  # [10] token id of each decimal digit
  sep_ids: jnp.ndarray  # [2, tail_len] list separator before a >= 0 / < 0 element
  sep_len: jnp.ndarray  # [2]
  # Observation template select (mode, value): MODE_NONE (zeros) = template 0, else an
  # immediate or scalar register read after the reset code, picking template 0..n_obs-1.
  obs_select: jnp.ndarray  # [2]


N_ALT = 10  # single-int answer modes: (grammar 1..5, first/last), `parse.alt_index` order


class Action(NamedTuple):
  """A parsed answer: ``found``, how many ints (``count``; 1 for a bare int) and the ints, plus
  the single-int answer modes (`parse.alt_index` order; ``None`` = none found)."""

  found: jnp.ndarray  # [] bool
  count: jnp.ndarray  # [] int32
  values: jnp.ndarray  # [list_len] int32
  alt_found: jnp.ndarray | None = None  # [N_ALT] bool: (grammar 1..5, first/last) matched
  alt_value: jnp.ndarray | None = None  # [N_ALT] int32 (int32-saturated; 0 unless alt_valid)
  # [N_ALT] bool: the match's content is an int (== alt_found but for ``box``, grammar 5);
  # None = alt_found.
  alt_valid: jnp.ndarray | None = None


def empty_program(cfg: ProgramConfig) -> dict[str, np.ndarray]:
  """Zero arrays with the shapes of every `EnvProgram` field (what builders fill in)."""
  t, s = cfg.n_templates, cfg.tpl_slots
  z = lambda *shape: np.zeros(shape, np.int32)
  return dict(
    reset_code=z(cfg.n_reset, 8),
    step_code=z(cfg.n_step, 8),
    tables=z(cfg.n_tables, cfg.list_len),
    table_len=z(cfg.n_tables),
    cases=z(cfg.n_cases, 5),
    n_cases=z(),
    max_turns=z(),
    answer=z(2),
    answer_mode=z(2),
    tpl_ids=z(t, cfg.tpl_tokens),
    tpl_len=z(t),
    tpl_slots=z(t, s, 6),
    tpl_tail=z(t, s, 2, cfg.tail_len),
    tpl_tail_len=z(t, s, 2),
    digit_ids=z(10),
    sep_ids=z(2, cfg.tail_len),
    sep_len=z(2),
    obs_select=z(2),
  )


def program_from_arrays(arrays: dict[str, np.ndarray]) -> EnvProgram:
  """An `EnvProgram` from a dict of arrays; arrays saved before ``obs_select`` or
  ``answer_mode`` existed load with zeros there (template 0; the last box's int list)."""
  arrays = dict(arrays)
  lead = np.shape(arrays["n_cases"])  # [] or a batch shape
  for name in ("obs_select", "answer_mode"):
    if name not in arrays:
      arrays[name] = np.zeros((*lead, 2), np.int32)
  return EnvProgram(**{k: np.asarray(v, np.int32) for k, v in arrays.items()})


def stack_programs(programs: list[EnvProgram]) -> EnvProgram:
  """Stacks programs along a new leading axis (for `vmap`)."""
  return EnvProgram(
    **{
      f.name: np.stack([np.asarray(getattr(p, f.name)) for p in programs])
      for f in dataclasses.fields(EnvProgram)
    }
  )


def make_action(values, cfg: ProgramConfig) -> Action:
  """Host helper: an `Action` from a list of ints (or ``None`` for "no answer"); the single-int
  modes are those of the text ``\\boxed{v}`` for one int ``v`` (``digits`` grammars need
  ``v >= 0``), none otherwise but a ``box`` whose content is no int (`parse.text_action`
  parses an actual text)."""
  out = np.zeros(cfg.list_len, np.int32)
  alt_found, alt_value = np.zeros(N_ALT, bool), np.zeros(N_ALT, np.int32)
  alt_valid = np.zeros(N_ALT, bool)
  if values is None:
    return Action(np.bool_(False), np.int32(0), out, alt_found, alt_value, alt_valid)
  out[: len(values)] = values
  alt_found[-2:] = True  # the box grammar: a box (valid below for one int)
  if len(values) == 1:
    v = int(values[0])
    alt_valid[:] = np.repeat([True, v >= 0, True, v >= 0, True], 2)
    alt_found |= alt_valid
    alt_value[alt_valid] = v
  return Action(np.bool_(True), np.int32(len(values)), out, alt_found, alt_value, alt_valid)
