"""The compact designer language: one token per assembly word, mapped onto the `EnvProgram` IR.

A program is the token form of an `assembly.py` text, in its order (turns, tables, reset code,
step code, answer, obs, optional hint, cases), ending with ``<|im_end|>``: the end token *is*
the tokenizer's stop token, so a sampled program ends the designer's turn. The library's
``arith_chain`` level 0 (`tiny_library`; 88 tokens; ``"..."`` is one phrase token, every digit
one token)::

  <turns> +3 <reset> <rand> <r0> +1 +20 <rand> <r1> +1 +20 <set> <r2> <r0> <add> <r2> <r2> <r1>
  <step> <eq> <r3> <nguess> +1 <eq> <r4> <guess> <r2> <and> <r3> <r3> <r4>
    <ge> <r5> <turn> <maxturns> <not> <r6> <found>
  <answer> <r2>
  <obs> "Compute " <r0> " + " <r1> "." " Answer with \\boxed{N}."
  <hint> "Evaluate the innermost parentheses first, then work outwards."
  <case> <r3> +1000 <stop> "Correct!"
  <case> <r5> +0 <go> "Wrong. No turns left. The answer was " <r2> "."
  <case> <r6> +0 <go> "No answer found. Put your final answer in \\boxed{}."
  <case> +1 +0 <go> "Wrong answer. Try again." <|im_end|>

* Words (`tokenizer.DESIGNER_WORDS`): keywords, opcodes (`program.STRAIGHT_LINE_OPS`, signatures `program.OPS`, no ``nop``),
  ``<r0>..``, ``<turn> <maxturns> <found> <guess> <nguess>``, ``<l0>.. <lguess>``, ``<t0>..``,
  ``<stop>``/``<go>``; a table is ``<table> <tK>`` and its values.
* Immediates: a sign token ``+``/``-``, then 1-9 digit tokens (no leading zero, no ``-0``).
  The sign *starts* every immediate, so ``<add> <r0> +5 +7`` needs no terminator (digits
  continue a number, anything else ends it) and table values no separator. Turns are
  ``+1..+max_turns_cap``; immediate rewards are in ``[-1000, 1000]`` (thousandths, as in the IR).
* Templates: phrase tokens (`tokenizer.phrase_table`), digits and ``-`` (before a digit) as
  literal text; registers and lists as number slots. The observation starts with a phrase (so a
  chat preamble before it tokenises on its own); hint and case templates are non-empty. The
  phrase table is prefix-free, so a template's tokens are exactly ``encode`` of its text and a
  text has one token form (`Language.text_tokens`).
* Registers, lists and tables are introduced in order and read only once written (`grammar`).

`Language.encode` / `decode` convert on the host; ``decode`` gives text that
``assembly.assemble(text, tok, TINY_CONFIG)`` accepts (the disassembly shown to researchers).
`assemble_tokens` and `first_templates_device` (`tiny/assemble.py`) work on device.
`tiny_library` has **every library family at every level** (45 programs, 80-201 tokens;
registers renumbered in order of first use, which changes no behaviour): the largest need 26
reset instructions (argmax level index 2), 15 literal tokens per template and 5 slots; sorting
level index 2 reveals a 10-number list of up to 51 tokens, hence ``feedback_len=64``. A program
that stops fitting (config, grammar or ``max_tokens``) is left out, and the tests name it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re

from spade_jax.envs.ir.assembly import split_lines as split_assembly_lines
from spade_jax.envs.ir.program import SPECIALS, STRAIGHT_LINE_OPS, ProgramConfig
from spade_jax.envs.ir.text import tokenizer_constants
from spade_jax.rollout.types import HINT_SEPARATOR
from spade_jax.tiny import grammar
from spade_jax.tiny.assemble import (  # noqa: F401  (re-exported: the language's device side)
  INFEASIBLE,
  REASONS,
  assemble_and_validate,
  assemble_tokens,
  dummy_program,
  feasible,
  first_templates_device,
)
from spade_jax.tiny.tokenizer import (
  BOXED,
  DESIGNER_WORDS,
  END_TOKEN,
  KEYWORDS,
  LIST_SEPARATOR,
  N_LIST_TOKENS,
  N_REG_TOKENS,
  N_TABLE_TOKENS,
  designer_token,
)

TINY_CONFIG = ProgramConfig(
  n_regs=16,
  n_lists=3,
  list_len=12,
  n_tables=2,
  n_reset=28,
  n_step=12,
  n_cases=6,
  tpl_tokens=24,
  tpl_slots=6,
  tail_len=2,
  obs_len=96,
  feedback_len=64,
  n_draws=32,
  max_turns_cap=16,
)
MAX_IMMEDIATE = 999_999_999  # 9 digits: parsing on device never overflows int32
# What an invalid sample is replaced by: ends at the first step, reward 0.
DUMMY_PROGRAM = """turns 1
reset
set r0 0
step
answer r0
obs "Game over."
case 1 0 stop "Game over."
"""


@dataclasses.dataclass(frozen=True)
class Language:
  """Token ids of the designer language for one tokenizer and config (hashable: a jit static
  argument). Build with `Language.make`."""

  cfg: ProgramConfig
  max_tokens: int  # sampled tokens per program, the end token included
  vocab_size: int
  keyword_ids: tuple[int, ...]  # aligned with tokenizer.KEYWORDS
  op_ids: tuple[int, ...]  # opcodes 1.. (STRAIGHT_LINE_OPS[1:])
  reg_ids: tuple[int, ...]
  special_ids: tuple[int, ...]
  list_ids: tuple[int, ...]
  lguess_id: int
  table_ids: tuple[int, ...]
  plus_id: int
  minus_id: int
  end_id: int
  digit_ids: tuple[int, ...]
  phrase_ids: tuple[int, ...]
  phrase_texts: tuple[str, ...]
  boxed_id: int
  close_id: int
  hint_sep_id: int
  sep_ids: tuple[tuple[int, ...], ...]  # [2][tail_len] list separators (>= 0 / < 0 element)
  sep_len: tuple[int, ...]
  dummy_tokens: tuple[int, ...] = ()

  @classmethod
  def make(cls, tok, cfg: ProgramConfig = TINY_CONFIG, max_tokens: int = 256) -> Language:
    """Reads the ids from ``tok`` (the tiny tokenizer, `tokenizer.load_tiny_tokenizer`) and
    verifies what the device assembler relies on: single-token digits, signs and phrases, a
    prefix-free added vocabulary, the solution and separator tokenisation."""
    if cfg.n_regs > N_REG_TOKENS or cfg.n_lists > N_LIST_TOKENS or cfg.n_tables > N_TABLE_TOKENS:
      raise ValueError("config has more registers / lists / tables than the tokenizer has words")
    vocab = tok.hf.get_vocab()
    missing = [w for w in DESIGNER_WORDS if designer_token(w) not in vocab]
    if missing:
      raise ValueError(f"tokenizer lacks designer words {missing[:5]}: use the tiny tokenizer")
    word = lambda w: int(vocab[designer_token(w)])
    single = lambda s: _single(tok, s)
    added = {int(i): t for i, t in tok.hf.added_tokens_decoder.items()}
    _check_prefix_free([t.content for t in added.values()])
    designer = {designer_token(w) for w in DESIGNER_WORDS}
    phrases = sorted(
      (i, t.content) for i, t in added.items() if not t.special and t.content not in designer
    )
    for i, text in phrases:
      if tok.encode(text) != [i]:
        raise ValueError(f"phrase {text!r} does not encode to its own token")
    consts = tokenizer_constants(tok, cfg)
    lang = cls(
      cfg=cfg,
      max_tokens=int(max_tokens),
      vocab_size=int(tok.vocab_size),
      keyword_ids=tuple(word(k) for k in KEYWORDS),
      op_ids=tuple(word(n) for n in STRAIGHT_LINE_OPS[1:]),
      reg_ids=tuple(word(f"r{i}") for i in range(cfg.n_regs)),
      special_ids=tuple(word(s) for s in SPECIALS),
      list_ids=tuple(word(f"l{i}") for i in range(cfg.n_lists)),
      lguess_id=word("lguess"),
      table_ids=tuple(word(f"t{i}") for i in range(cfg.n_tables)),
      plus_id=single("+"),
      minus_id=single("-"),
      end_id=tok.token_id(END_TOKEN),
      digit_ids=tuple(int(d) for d in consts["digit_ids"]),
      phrase_ids=tuple(i for i, _ in phrases),
      phrase_texts=tuple(t for _, t in phrases),
      boxed_id=single(BOXED),
      close_id=single("}"),
      hint_sep_id=single(HINT_SEPARATOR),
      sep_ids=tuple(tuple(int(t) for t in row) for row in consts["sep_ids"]),
      sep_len=tuple(int(n) for n in consts["sep_len"]),
    )
    comma = single(LIST_SEPARATOR)
    if lang.sep_ids[0][: lang.sep_len[0]] != (comma,) or lang.sep_ids[1][: lang.sep_len[1]] != (
      comma,
      lang.minus_id,
    ):
      raise ValueError("list separators do not tokenise as ', ' / ', ' '-'")
    if tok.encode(BOXED + "7}") != [lang.boxed_id, lang.digit_ids[7], lang.close_id]:
      raise ValueError("the solution \\boxed{N} does not tokenise as phrase, digits, '}'")
    if tok.eos_ids[0] != lang.end_id:
      raise ValueError(f"the tokenizer's first eos must be {END_TOKEN}")
    lang = dataclasses.replace(lang, dummy_tokens=tuple(lang.encode(DUMMY_PROGRAM)))
    tb = grammar.tables(lang)
    if tb.mincomp[tb.start] > lang.max_tokens:
      raise ValueError(f"max_tokens {max_tokens} < the shortest program ({tb.mincomp[tb.start]})")
    return lang

  # ------------------------------------------------------------------------ host encode
  def encode(self, text: str) -> list[int]:
    """Assembly text (the subset in the module docstring) -> designer tokens, ending with the
    end token. Raises ValueError("line N: reason")."""
    out, starts = [], []
    for line in split_assembly_lines(text):
      starts.append((len(out), line.number))
      try:
        out += self._line_tokens(line.words)
      except ValueError as e:
        raise ValueError(f"line {line.number}: {e}") from None
    out.append(self.end_id)
    reason, pos = grammar.check_tokens(self, out)
    if reason:
      number = max([n for s, n in starts if s <= pos], default=0)
      raise ValueError(f"line {number}: {grammar.PARSE_REASONS[reason]}")
    return out

  def _line_tokens(self, words) -> list[int]:
    head, rest = words[0], words[1:]
    if head in KEYWORDS[:-2]:
      out = [self.keyword_ids[KEYWORDS.index(head)]]
    elif head in STRAIGHT_LINE_OPS[1:]:
      out = [self.op_ids[STRAIGHT_LINE_OPS.index(head) - 1]]
    else:
      raise ValueError(f"unknown statement {head!r}")
    if head in ("obs", "hint"):
      return out + self._template_tokens(rest)
    if head == "case":
      if len(rest) < 4:
        raise ValueError("expected 'case PRED REWARD stop|go TEMPLATE...'")
      return (
        out + [t for w in rest[:3] for t in self._word_tokens(w)] + self._template_tokens(rest[3:])
      )
    return out + [t for w in rest for t in self._word_tokens(w)]

  def _word_tokens(self, w: str) -> list[int]:
    if re.fullmatch(r"-?[0-9]+", w):
      v = int(w)
      if abs(v) > MAX_IMMEDIATE:
        raise ValueError(f"immediate {v} has more than 9 digits")
      return [self.minus_id if v < 0 else self.plus_id] + [
        self.digit_ids[int(d)] for d in str(abs(v))
      ]
    if w in ("stop", "go"):
      return [self.keyword_ids[KEYWORDS.index(w)]]
    return [self._register(w)]

  def _register(self, w: str) -> int:
    if w in SPECIALS:
      return self.special_ids[SPECIALS.index(w)]
    if w == "lguess":
      return self.lguess_id
    m = re.fullmatch(r"([rlt])([0-9]+)", w)
    ids = m and {"r": self.reg_ids, "l": self.list_ids, "t": self.table_ids}[m.group(1)]
    if not m or int(m.group(2)) >= len(ids):
      raise ValueError(f"{w!r} is not a word of the language (or out of range for the config)")
    return ids[int(m.group(2))]

  def _template_tokens(self, words) -> list[int]:
    out, text = [], ""
    for w in words + ["<end>"]:  # adjacent strings are one text (as `compile_template` joins them)
      if w.startswith('"'):
        text += json.loads(w)
        continue
      out += self.text_tokens(text)
      text = ""
      if w != "<end>":
        out.append(self._register(w))
    return out

  def text_tokens(self, text: str) -> list[int]:
    """Literal text -> phrase, digit and ``-`` tokens (the unique parse over the prefix-free
    phrase table; equal to ``tok.encode(text)``). Raises ValueError if no phrase fits."""
    table, lengths = _phrase_lookup(self)
    out, i = [], 0
    while i < len(text):
      if text[i].isdigit() and text[i].isascii():
        out.append(self.digit_ids[int(text[i])])
        i += 1
        continue
      if text[i] == "-" and i + 1 < len(text) and text[i + 1].isdigit():
        out.append(self.minus_id)
        i += 1
        continue
      hit = next((n for n in lengths if text[i : i + n] in table), None)
      if hit is None:
        raise ValueError(f"no phrase of the table matches {text[i : i + 30]!r}")
      out.append(table[text[i : i + hit]])
      i += hit
    return out

  # ------------------------------------------------------------------------ host decode
  def decode(self, tokens, strict: bool = True) -> str:
    """Designer tokens -> assembly text (up to the end token). ``strict``: raise ValueError
    if the tokens are not a complete program of the grammar; otherwise decode best effort
    (unknown tokens shown as ``<?id>``)."""
    tokens = [int(t) for t in tokens]
    if strict:
      reason, pos = grammar.check_tokens(self, tokens)
      if reason:
        raise ValueError(f"token {pos}: {grammar.PARSE_REASONS[reason]}")
    names = _token_names(self)
    lines, words, text, num, tpl = [], [], None, None, False

    def flush():
      nonlocal text, num
      if text is not None:
        words.append(json.dumps(text, ensure_ascii=False))
      if num is not None:
        words.append(num)
      text = num = None

    for t in tokens:
      kind, val = names.get(t, ("?", f"<?{t}>"))
      if kind == "end":
        break
      if kind == "stmt":
        flush()
        if words:
          lines.append(" ".join(words))
        words, tpl = [val], val in ("obs", "hint")
      elif tpl and kind in ("text", "digit", "minus"):
        num, text = None, (text or "") + val
      elif kind in ("plus", "minus"):
        flush()
        num = val
      elif kind == "digit" and num is not None:
        num += val
      else:
        flush()
        words.append(val)
        tpl = tpl or val in ("stop", "go")
    flush()
    if words:
      lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def _single(tok, text: str) -> int:
  ids = tok.encode(text)
  if len(ids) != 1:
    raise ValueError(f"{text!r} must be one token of the tiny tokenizer, got {ids}")
  return ids[0]


def _check_prefix_free(contents) -> None:
  ordered = sorted(contents)
  for a, b in zip(ordered, ordered[1:]):
    if b.startswith(a):
      raise ValueError(f"added tokens are not prefix-free: {a!r} / {b!r}")


@functools.lru_cache(maxsize=8)
def _phrase_lookup(lang: Language):
  table = dict(zip(lang.phrase_texts, lang.phrase_ids))
  return table, sorted({len(p) for p in table}, reverse=True)


@functools.lru_cache(maxsize=8)
def _token_names(lang: Language) -> dict[int, tuple[str, str]]:
  names = {t: ("stmt", k) for k, t in zip(KEYWORDS, lang.keyword_ids)}
  names.update({t: ("stmt", n) for n, t in zip(STRAIGHT_LINE_OPS[1:], lang.op_ids)})
  for w in ("stop", "go"):
    names[lang.keyword_ids[KEYWORDS.index(w)]] = ("word", w)
  words = [(f"r{i}", t) for i, t in enumerate(lang.reg_ids)] + list(zip(SPECIALS, lang.special_ids))
  words += [(f"l{i}", t) for i, t in enumerate(lang.list_ids)] + [("lguess", lang.lguess_id)]
  words += [(f"t{i}", t) for i, t in enumerate(lang.table_ids)]
  names.update({t: ("word", w) for w, t in words})
  names.update({t: ("digit", str(d)) for d, t in enumerate(lang.digit_ids)})
  names.update({t: ("text", p) for p, t in zip(lang.phrase_texts, lang.phrase_ids)})
  names[lang.plus_id], names[lang.minus_id] = ("plus", ""), ("minus", "-")
  names[lang.end_id] = ("end", "")
  return names


# ------------------------------------------------------------------------------- library
def rename_registers(text: str) -> str:
  """Renumbers general registers, lists and tables in order of first appearance (the
  grammar's in-order introduction; the program's behaviour is unchanged). Drops comments."""
  maps: dict[str, dict[str, str]] = {"r": {}, "l": {}, "t": {}}

  def rename(w: str) -> str:
    m = re.fullmatch(r"([rlt])([0-9]+)", w)
    if not m:
      return w
    seen = maps[m.group(1)]
    return seen.setdefault(w, f"{m.group(1)}{len(seen)}")

  lines = [" ".join(rename(w) for w in line.words) for line in split_assembly_lines(text)]
  return "\n".join(lines) + "\n"


HINTS = ("library", "answer")
ANSWER_HINT = ("The answer is ", ".")


def answer_hint(text: str) -> str:
  """``text`` (an assembly program) with its hint replaced by one that shows the answer:
  ``hint "The answer is " <answer register or list> "."`` (inserted after ``obs`` when the
  program has no hint). The strongest hint the language can state: with it, hinted play is a
  copy, so regret measures how far the unhinted agent is from a game it could be taught."""
  lines = [line for line in text.splitlines() if line.split()[:1] != ["hint"]]
  answer = next(line.split()[1] for line in lines if line.split()[:1] == ["answer"])
  head, tail = (json.dumps(t) for t in ANSWER_HINT)
  at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["obs"]) + 1
  return "\n".join(lines[:at] + [f"hint {head} {answer} {tail}"] + lines[at:]) + "\n"


def tiny_library(lang: Language, hints: str = "library") -> list[tuple[str, int, list[int]]]:
  """``(family, level index, tokens)`` for every library family/level that the language and
  ``lang.cfg`` express within ``lang.max_tokens`` (see the module docstring). ``hints``:
  ``"library"`` keeps each family's prose hint, ``"answer"`` replaces it (`answer_hint`)."""
  from spade_jax.envs.library import FAMILIES

  out = []
  for name, fam in FAMILIES.items():
    for level_index, level in enumerate(fam.levels):
      tokens = library_tokens(lang, fam.program(**level), hints)
      if tokens is not None:
        out.append((name, level_index, tokens))
  return out


def library_tokens(lang: Language, text: str, hints: str = "library") -> list[int] | None:
  """A library generator's assembly ``text`` as designer tokens (registers renumbered, the
  hint per ``hints``), or None if the language or ``lang.max_tokens`` cannot express it."""
  if hints not in HINTS:
    raise ValueError(f"hints must be one of {HINTS}, got {hints!r}")
  if hints == "answer":
    text = answer_hint(text)
  try:
    tokens = lang.encode(rename_registers(text))
  except ValueError:
    return None
  return tokens if len(tokens) <= lang.max_tokens else None
