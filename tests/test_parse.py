"""Boxed-answer parsing on device equals the Python regex reference."""

from __future__ import annotations

import random

import jax
import numpy as np
import pytest
from envs_fixtures import tokenizer

from spade_jax.envs.ir.parse import (
  ParseTables,
  make_parse_tables,
  parse_boxed,
  parse_feed,
  parse_init,
  parse_result,
  parse_tokens,
  reduce_token,
)

MAX_ITEMS = 12
T = 48  # tokens per fuzzed sequence

EXAMPLES = [
  ("\\boxed{42}", [42]),
  ("The answer is \\boxed{-3, 4}.", [-3, 4]),
  ("\\boxed{ 7 }", [7]),
  ("\\boxed{\n3\t}", [3]),
  ("\\boxed{007}", [7]),
  ("\\boxed{-0}", [0]),
  ("\\boxed{1} then \\boxed{2}", [2]),
  ("\\boxed{1} then \\boxed{x}", None),  # the last boxed answer wins even if invalid
  ("\\boxed{1} then \\boxed{2, {3}}", [1]),  # a nested brace is no match at all
  ("\\boxed{\\frac{1}{2}}", None),
  ("\\boxed{{5}}", None),
  ("\\boxed{5}}", [5]),
  ("\\\\boxed{5}", [5]),
  ("\\boxed{2147483647}", [2147483647]),
  ("\\boxed{2147483648}", None),
  ("\\boxed{-2147483648}", [-2147483648]),
  ("\\boxed{1,}", None),
  ("\\boxed{,1}", None),
  ("\\boxed{- 1}", None),
  ("\\boxed{1 2}", None),
  ("\\boxed{}", None),
  ("\\boxed 5", None),
  ("\\boxed{" + ", ".join(["1"] * 12) + "}", [1] * 12),
  ("\\boxed{" + ", ".join(["1"] * 13) + "}", None),
  ("no answer", None),
  ("\\box\\boxed{8}", [8]),
]


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def setup(request):
  tok = tokenizer(request.param)
  tables = make_parse_tables(tok.token_bytes)
  fn = jax.jit(jax.vmap(lambda ids, n: parse_tokens(ids, n, tables, MAX_ITEMS)))
  return tok, tables, fn


def _run(fn, seqs):
  ids = np.zeros((len(seqs), T), np.int32)
  lens = np.zeros(len(seqs), np.int32)
  for i, s in enumerate(seqs):
    ids[i, : len(s)] = s
    lens[i] = len(s)
  out = jax.tree.map(np.asarray, fn(ids, lens))
  return [list(out.values[i][: out.count[i]]) if out.found[i] else None for i in range(len(seqs))]


def test_reference_examples():
  for text, want in EXAMPLES:
    assert parse_boxed(text, MAX_ITEMS) == want, text


def test_device_parser_on_examples(setup):
  tok, _, fn = setup
  assert _run(fn, [tok.encode(t) for t, _ in EXAMPLES]) == [w for _, w in EXAMPLES]


def _fuzz_sequences(tok, n: int, seed: int) -> list[list[int]]:
  """Token sequences mixing answer fragments, explicitly split tokens (``\\``, ``box``,
  ``ed{`` ...), nested braces, several boxed answers, negatives, overflow and random tokens."""
  rng = random.Random(seed)
  pieces = [
    "\\boxed{",
    "\\boxed{-12, 7}",
    "\\boxed{ -3 }",
    "{",
    "}",
    "{{",
    "}}",
    "-",
    "--",
    ",",
    ", ",
    " ",
    "\n",
    "x",
    "0",
    "9",
    "42",
    "-7",
    "2147483647",
    "2147483648",
    "99999999999",
    "\\boxed",
    "boxed",
    "The answer is ",
    "\\boxed{}",
    ",,",
    "é",
  ]
  split = [tok.encode(p) for p in ("\\", "box", "ed{", "ed", "b", "o", "x", "e", "d", "{")]
  vocab = len(tok.token_bytes)
  out = []
  for _ in range(n):
    seq: list[int] = []
    while len(seq) < T:
      r = rng.random()
      if r < 0.15:
        seq.append(rng.randrange(vocab))
      elif r < 0.35:
        for part in split[:3] if rng.random() < 0.6 else [rng.choice(split)]:
          seq += part
      else:
        seq += tok.encode(rng.choice(pieces))
    out.append(seq[: rng.randint(0, T)])
  return out


def test_fuzz_agrees_with_reference(setup):
  """>= 10k fuzzed sequences in total per tokenizer."""
  tok, _, fn = setup
  seqs = _fuzz_sequences(tok, 10_240, seed=len(tok.token_bytes))
  got = _run(fn, seqs)
  found = 0
  for seq, g in zip(seqs, got):
    want = parse_boxed(b"".join(tok.token_bytes[t] for t in seq), MAX_ITEMS)
    assert g == want, (tok.decode(seq), want, g)
    found += want is not None
  assert 0.05 * len(seqs) < found < 0.95 * len(seqs)  # both outcomes are well represented


def test_incremental_feed_equals_scan(setup):
  """Feeding one token per call (as a decode loop does) gives the scan's answer."""
  tok, tables, fn = setup
  if tok is not tokenizer("tiny"):
    pytest.skip("the automaton is tokenizer-independent; run once")
  seqs = [s for s in _fuzz_sequences(tok, 40, seed=1) if len(s) > 24][:4]
  feed = jax.jit(lambda st, t: parse_feed(st, t, tables))
  for seq, want in zip(seqs, _run(fn, seqs)):
    st = parse_init(MAX_ITEMS)
    for t in seq:
      st = feed(st, t)
    res = jax.tree.map(np.asarray, parse_result(st))
    assert (list(res.values[: res.count]) if res.found else None) == want


def test_reduced_token_classes_are_equivalent_to_raw_bytes():
  """Random byte strings as a synthetic vocabulary, parsed with the reduced table and with a
  table of unreduced byte classes: same answers, equal to the reference."""
  rng = random.Random(3)
  alphabet = list(b"\\boxed{}-, 0123456789\n\tabcz")
  vocab = [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(300)]
  vocab += [b"\\boxed{", b"ed{", b"\\b", b"oxed", b"}}}", b"{{{", b"---5", b",,,", b"    "]
  reduced = make_parse_tables(vocab)
  raw = np.zeros((len(vocab), 8), np.int32)
  for i, b in enumerate(vocab):
    raw[i, : len(b)] = [reduce_token(bytes([c]))[0] for c in b]
  raw_tables = ParseTables(raw)
  assert (reduced.classes != 0).sum() < (raw != 0).sum()  # the reduction did shorten tokens
  seqs = [[rng.randrange(len(vocab)) for _ in range(rng.randint(0, 24))] for _ in range(2048)]
  outs = []
  for tables in (reduced, raw_tables):
    fn = jax.jit(jax.vmap(lambda ids, n, tables=tables: parse_tokens(ids, n, tables, MAX_ITEMS)))
    outs.append(_run(fn, seqs))
  assert outs[0] == outs[1]
  assert outs[0] == [parse_boxed(b"".join(vocab[t] for t in s), MAX_ITEMS) for s in seqs]


def test_smollm2_table_is_narrow():
  tables = make_parse_tables(tokenizer("smollm2").token_bytes)
  assert tables.classes.shape == (49152, 7)
