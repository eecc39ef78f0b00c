"""The tiny tokenizer: deterministic offline build, phrase table, digits, framing, token bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from spade_jax.envs.ir.parse import make_parse_tables, parse_boxed, parse_tokens
from spade_jax.envs.library import FAMILIES
from spade_jax.rollout.chat import ChatFraming
from spade_jax.rollout.types import HINT_SEPARATOR
from spade_jax.tiny import tokenizer as tt

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok():
  return tt.load_tiny_tokenizer()


def _render(items, value: int, values) -> str:
  """A template's text with every scalar slot = ``value`` and every list slot = ``values``."""
  out = []
  for kind, val in items:
    if kind == "text":
      out.append(val)
    elif val.startswith("l") or val == "lguess":
      out.append(", ".join(str(v) for v in values))
    else:
      out.append(str(value))
  return "".join(out)


def test_build_is_deterministic_small_and_loads(tmp_path, tok):
  again = tt.build_tokenizer(tmp_path / "again")
  a = json.loads((Path(tt.tiny_tokenizer_dir()) / "tokenizer.json").read_text())
  b = json.loads((Path(again) / "tokenizer.json").read_text())
  assert a == b
  assert 500 < tok.vocab_size < 1024
  assert tok.eos_ids[0] == tok.token_id("<|im_end|>")
  for w in tt.DESIGNER_WORDS:  # every designer word is one token
    assert tok.encode(tt.designer_token(w)) == [tok.token_id(tt.designer_token(w))]


def test_phrases_are_single_prefix_free_tokens(tok):
  phrases = tt.phrase_table()
  assert {", ", HINT_SEPARATOR, "\\boxed{", "}", "Correct!"} <= set(phrases)
  for p in phrases:
    assert len(tok.encode(p)) == 1, p
  added = sorted(t.content for t in tok.hf.added_tokens_decoder.values())
  assert all(not b.startswith(a) for a, b in zip(added, added[1:]))
  # a concatenation of phrases encodes as exactly those phrases (the prefix-free property)
  rng = np.random.default_rng(0)
  for _ in range(200):
    pick = [phrases[i] for i in rng.integers(0, len(phrases), 4)]
    assert tok.encode("".join(pick)) == [tok.encode(p)[0] for p in pick]
  assert tok.encode("\\boxed{42}") == [tok.encode(x)[0] for x in ("\\boxed{", "4", "2", "}")]


def test_digits_and_signs_are_one_token_each(tok):
  digit = [tok.encode(str(d)) for d in range(10)]
  assert all(len(d) == 1 for d in digit) and len({d[0] for d in digit}) == 10
  assert tok.encode("90817") == [digit[int(c)][0] for c in "90817"]
  assert tok.encode("Correct!-42") == [tok.encode("Correct!")[0], tok.encode("-")[0]] + [
    digit[4][0],
    digit[2][0],
  ]


def _expected(text: str, phrase_id: dict, tok) -> list[int]:
  """Reference tokenisation: longest phrase prefix, else a digit, else ``-`` before a digit."""
  out, i = [], 0
  while i < len(text):
    hit = max((p for p in phrase_id if text.startswith(p, i)), key=len, default=None)
    if hit is None:
      assert text[i].isdigit() or (text[i] == "-" and text[i + 1].isdigit()), text[i:]
      hit = text[i]
    out.append(phrase_id.get(hit) or tok.encode(hit)[0])
    i += len(hit)
  return out


def test_library_templates_encode_as_phrases_digits_and_signs(tok):
  """Every library template's text (slots filled with negative numbers and lists) encodes
  as phrase tokens, one token per digit, ``-`` signs and ``", "`` separators, and decodes back."""
  phrase_id = {p: tok.encode(p)[0] for p in tt.phrase_table()}
  n = 0
  for fam in FAMILIES.values():
    for level in fam.levels:
      for items in tt.template_texts(fam.program(**level)):
        for value, values in ((-305, (7, -12, 0)), (8, ())):
          text = _render(items, value, values)
          ids = tok.encode(text)
          assert ids == _expected(text, phrase_id, tok), text
          assert tok.decode(ids) == text
        n += 1
  assert n > 300
  minus, comma = tok.encode("-")[0], phrase_id[", "]
  digits = lambda s: [tok.encode(c)[0] for c in s]
  want = digits("7") + [comma, minus] + digits("12") + [comma] + digits("0")
  assert tok.encode("7, -12, 0") == want


def test_chat_framing_token_bytes_and_answer_parser(tok):
  ChatFraming.from_tokenizer(tok)
  framing = ChatFraming.from_tokenizer(tok, system="You design games.")
  assert framing.turn_end == tok.token_id("<|im_end|>")
  tb = tok.token_bytes
  assert len(tb) == tok.vocab_size
  assert tb[tok.token_id("<add>")] == b"<add>"
  assert tb[tok.encode(HINT_SEPARATOR)[0]] == HINT_SEPARATOR.encode()
  for text in ("Correct! The number was -17.", "ünï 🎲 \\boxed{3, -4}", "Sort: 9, 2. <r3> x"):
    assert b"".join(tb[i] for i in tok.encode(text)) == text.encode()
  # the on-device answer parser reads phrase tokens such as "\\boxed{" through token_bytes
  tables = make_parse_tables(tb)
  for answer in ("I think \\boxed{-42}.", "Correct! \\boxed{1, 2, 3}", "\\boxed{} no"):
    ids = tok.encode(answer)
    width = 32
    act = jax.jit(parse_tokens, static_argnums=3)(
      np.pad(ids, (0, width - len(ids))), len(ids), tables, 12
    )
    want = parse_boxed(answer, 12)
    assert bool(act.found) == (want is not None)
    if want is not None:
      assert np.asarray(act.values)[: len(want)].tolist() == want


def test_tokenizer_directory_is_removed_at_exit():
  code = "from spade_jax.tiny import tokenizer as t; d = t.tiny_tokenizer_dir(); print(d)"
  out = subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
  )
  d = Path(out.stdout.strip().splitlines()[-1])
  assert d.name.startswith("spade_tiny_tok_") and not d.exists()
