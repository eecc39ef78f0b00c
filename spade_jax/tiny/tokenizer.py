"""The tiny tokenizer: byte-level BPE + designer-language words + a phrase table, built offline.

Built deterministically from nothing but this module and the environment library (no
download): a small byte-level BPE (`tokenizers`, digits split individually, ChatML template,
specials ``<|endoftext|> <|im_start|> <|im_end|>``, eos ``<|im_end|>``) plus *added tokens*
(not normalized, no strip), saved as an HF directory that `spade_jax.tokenizer.load_tokenizer`
loads:

* every designer-language word as one token ``<word>`` (`DESIGNER_WORDS`: section keywords,
  opcodes, registers, specials, lists, tables, ``stop``/``go``);
* the **phrase table** (`phrase_table`): the literal text of every library template
  (observation, hint, feedback, solution; every family and level) split at register slots and
  at signed digit runs (``-?[0-9]+``: digits stay one token each, as `envs/ir/text.py` requires),
  the list separator ``", "``, ``"\\n\\nHINT: "`` (`rollout.types.HINT_SEPARATOR`),
  ``"\\boxed{"`` and `GENERIC_PHRASES` for designer-written games.

Why the phrase table is made **prefix-free** (no added token is a proper prefix of another):
HF tokenizers split text on added tokens first, leftmost-longest. With a prefix-free set, any
concatenation of phrases, digits and ``-`` signs encodes as exactly those phrase, digit and sign
tokens (a prefix code decodes uniquely and greedily; a digit or sign never belongs to a
phrase). So a template the designer writes token by token renders, on device, to the very
tokens ``encode`` gives for its text, with constant per-slot tails (a negative number adds
``-``, an empty list removes nothing) -- which is what lets `tiny.assemble` build templates
without a tokenizer. Phrases that would break the property are factored (``"Correct! The
number was "`` becomes ``"Correct!" + " The number was "``); designer words and specials are
never split. Phrases are ASCII (the ByteLevel decoder maps some Latin-1 characters to bytes).
"""

from __future__ import annotations

import atexit
import functools
import json
import re
import shutil
import tempfile
from pathlib import Path

from spade_jax.envs.ir.assembly import split_lines as split_assembly_lines
from spade_jax.envs.ir.program import SPECIALS, STRAIGHT_LINE_OPS
from spade_jax.rollout.types import HINT_SEPARATOR
from spade_jax.tokenizer import import_transformers, load_tokenizer

CHATML_TEMPLATE = (
  "{% for message in messages %}"
  "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
  "{% endfor %}"
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
END_TOKEN = "<|im_end|>"  # ends a designer program (and every assistant turn)
BPE_VOCAB = 320  # byte alphabet + specials + ~60 merges
N_REG_TOKENS, N_LIST_TOKENS, N_TABLE_TOKENS = 16, 4, 4
KEYWORDS = ("turns", "table", "reset", "step", "answer", "obs", "hint", "case", "stop", "go")
DESIGNER_WORDS: tuple[str, ...] = (
  KEYWORDS
  + tuple(STRAIGHT_LINE_OPS[1:])  # the straight-line opcodes but nop (nops only pad)
  + tuple(f"r{i}" for i in range(N_REG_TOKENS))
  + SPECIALS
  + tuple(f"l{i}" for i in range(N_LIST_TOKENS))
  + ("lguess",)
  + tuple(f"t{i}" for i in range(N_TABLE_TOKENS))
)
LIST_SEPARATOR = ", "
BOXED = "\\boxed{"
# Phrases for designer-written games (chosen not to be prefixes of library phrases).
GENERIC_PHRASES = (
  "Correct!",
  "Too high.",
  "Too low.",
  "Try again.",
  "Not quite.",
  "Well done!",
  "Game over.",
  "That is not allowed.",
  "The answer was ",
  "The answer is ",
  " is too high.",
  " is too low.",
  " is correct.",
  " is not correct.",
  "Turns left: ",
  " turns left.",
  "Score: ",
  "What is the product of ",
  "What is the difference between ",
  "What is the largest number in ",
  "What is the smallest number in ",
  "Find the number x such that ",
  "Find the missing number in ",
  "How many numbers in ",
  "Count the numbers in ",
  "Guess the secret number between ",
  "Guess the secret list of ",
  "Here are some numbers: ",
  "The list is ",
  "Start at ",
  "Multiply by ",
  "Divide by ",
  " + ",
  " - ",
  " * ",
  " // ",
  " % ",
  " = ",
  " < ",
  " > ",
  " is even",
  " is odd",
  " and ",
  " or ",
  " then ",
  " times",
  " numbers",
  " are correct.",
  " is divisible by ",
  " modulo ",
  " squared",
  "Answer with a list in \\boxed{}.",
  "Answer with \\boxed{N}.",
)


def designer_token(word: str) -> str:
  """The token string of a designer-language word (``add`` -> ``<add>``)."""
  return f"<{word}>"


# ---------------------------------------------------------------------------- phrase table
def template_texts(program_text: str) -> list[list]:
  """The templates of one assembly program as item lists (``("text", s)`` / ``("reg", w)``),
  adjacent texts merged, plus the solution template."""
  out = [[("text", BOXED), ("reg", "answer"), ("text", "}")]]
  for line in split_assembly_lines(program_text):
    head, words = line.words[0], line.words
    if head not in ("obs", "hint", "case"):
      continue
    items: list = []
    for w in words[1:] if head != "case" else words[4:]:
      if w.startswith('"'):
        s = json.loads(w)
        if items and items[-1][0] == "text":
          items[-1] = ("text", items[-1][1] + s)
        else:
          items.append(("text", s))
      else:
        items.append(("reg", w))
    out.append(items)
  return out


def split_text(text: str) -> list[str]:
  """A literal text -> pieces: phrases and signed digit runs (``-?[0-9]+``), in order."""
  pieces, pos = [], 0
  for m in re.finditer(r"-?[0-9]+", text):
    if m.start() > pos:
      pieces.append(text[pos : m.start()])
    pieces.append(m.group())
    pos = m.end()
  if pos < len(text):
    pieces.append(text[pos:])
  return pieces


def library_phrases() -> list[str]:
  """Every phrase of every library template (all families, all levels), first-seen order."""
  from spade_jax.envs.library import FAMILIES

  seen: dict[str, None] = {}
  for fam in FAMILIES.values():
    for level in fam.levels:
      for items in template_texts(fam.program(**level)):
        for kind, val in items:
          if kind == "text":
            for piece in split_text(val):
              if not re.fullmatch(r"-?[0-9]+", piece):
                seen.setdefault(piece, None)
  return list(seen)


def prefix_free(phrases, atoms=()) -> list[str]:
  """Factors ``phrases`` until no member of the result (or of ``atoms``, which must stay
  whole) is a proper prefix of another; every input phrase is a concatenation of outputs."""
  members: set[str] = set(atoms)
  atoms = frozenset(atoms)

  def add(q: str):
    if not q or q in members:
      return
    shorter = [p for p in members if q.startswith(p)]
    if shorter:  # q = p + rest
      add(q[len(max(shorter, key=len)) :])
      return
    longer = [p for p in members if p.startswith(q)]
    if any(p in atoms for p in longer):
      raise ValueError(f"phrase {q!r} is a prefix of a designer or special token")
    members.difference_update(longer)
    members.add(q)
    for p in longer:
      add(p[len(q) :])

  for q in sorted(dict.fromkeys(phrases), key=lambda s: (len(s), s)):
    add(q)
  return sorted(members - atoms)


@functools.lru_cache(maxsize=1)
def phrase_table() -> tuple[str, ...]:
  """The added phrase tokens, sorted (deterministic ids)."""
  atoms = list(SPECIAL_TOKENS) + [designer_token(w) for w in DESIGNER_WORDS]
  wanted = [LIST_SEPARATOR, HINT_SEPARATOR, BOXED, *library_phrases(), *GENERIC_PHRASES]
  out = prefix_free(wanted, atoms)
  bad = [p for p in out if not p.isascii() or re.search(r"[0-9]", p)]
  if bad:
    raise ValueError(f"phrases must be ASCII without digits: {bad}")
  return tuple(out)


def _corpus() -> list[str]:
  """Training text of the BPE part: chat words, library phrases, answers and some prose."""
  text = [
    "user assistant system user assistant system",
    "I think the answer is \\boxed{42}. The answer is \\boxed{-17}. \\boxed{2, 4, 6, 9}",
    "Let me think. First compute the sum, then the product. So the result is 12.",
    "the number of the list is a and the value of b is the answer to the question",
    "0123456789 +-*/%=<>()[]{},.;:!?'\"#&|^~_@$ abcdefghijklmnopqrstuvwxyz",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ \t\n\n",
  ]
  return text * 8 + list(phrase_table())


# --------------------------------------------------------------------------------- build
def build_tokenizer(out_dir) -> str:
  """Builds the tiny tokenizer (deterministic, offline) into ``out_dir``; returns the path."""
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

  PreTrainedTokenizerFast = import_transformers().PreTrainedTokenizerFast

  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.Sequence(
    [
      pre_tokenizers.Digits(individual_digits=True),
      pre_tokenizers.ByteLevel(add_prefix_space=False),
    ]
  )
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=BPE_VOCAB,
    special_tokens=list(SPECIAL_TOKENS),
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
  )
  tok.train_from_iterator(_corpus(), trainer=trainer)
  added = [designer_token(w) for w in DESIGNER_WORDS] + list(phrase_table())
  tok.add_tokens(
    [AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False) for t in added]
  )
  hf = PreTrainedTokenizerFast(
    tokenizer_object=tok,
    eos_token=END_TOKEN,
    pad_token="<|endoftext|>",
    bos_token=None,
    additional_special_tokens=["<|im_start|>"],
  )
  hf.chat_template = CHATML_TEMPLATE
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  hf.save_pretrained(str(out))
  return str(out)


@functools.lru_cache(maxsize=1)
def tiny_tokenizer_dir() -> str:
  """The tiny tokenizer, built once per process into a temporary directory (removed when the
  process exits)."""
  out = tempfile.mkdtemp(prefix="spade_tiny_tok_")
  atexit.register(shutil.rmtree, out, ignore_errors=True)
  return build_tokenizer(out)


def load_tiny_tokenizer():
  """The tiny tokenizer as a `spade_jax.tokenizer.Tokenizer`."""
  return load_tokenizer(tiny_tokenizer_dir())
