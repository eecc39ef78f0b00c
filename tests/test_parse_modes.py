"""Answer modes: the device parser's first/last single-int results equal Python's
``re.search`` / ``re.findall(...)[-1]`` on the text, the list answer is unchanged, the
interpreter picks the program's mode, assembly round-trips the ``parse`` line. Grammar 5
``box`` is ``re.search(r"\\\\boxed\\{([^}]*)\\}", t)`` / ``findall(...)[-1]`` then ``int()``
of the stripped content (found, valid, value)."""

from __future__ import annotations

import random
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from envs_fixtures import tokenizer

from spade_jax.envs.ir.assembly import AssemblyError, assemble
from spade_jax.envs.ir.checks import check_program
from spade_jax.envs.ir.disassembly import disassemble
from spade_jax.envs.ir.interpreter import ProgramEnv
from spade_jax.envs.ir.parse import (
  BOX,
  BOX_INVALID,
  GRAMMAR_NAMES,
  GRAMMARS,
  ParseTables,
  alt_index,
  make_parse_tables,
  parse_boxed,
  parse_feed,
  parse_init,
  parse_modes,
  parse_result,
  parse_tokens,
  reduce_token,
  select_answer,
  text_action,
)
from spade_jax.envs.ir.program import (
  DEFAULT_CONFIG,
  N_ALT,
  SPECIAL_FOUND,
  SPECIAL_GUESS,
  SPECIAL_NGUESS,
  make_action,
  program_from_arrays,
  stack_programs,
)

CFG = DEFAULT_CONFIG
MAX_ITEMS = CFG.list_len
FRAGMENTS = [
  "\\boxed{",
  "\\box",
  "ed{",
  "{",
  "}",
  "0",
  "7",
  "-",
  " ",
  "\n",
  ",",
  "x",
  "+",
  "12",
  "2147483648",
  "-2147483649",
]
# The env-side regexes, written as translated environments write them (str patterns).
PY_GRAMMARS = {1: r"-?\d+", 2: r"\d+", 3: r"\s*-?\d+\s*", 4: r"\s*\d+\s*"}
PY_BOX = re.compile(r"\\boxed\{([^}]*)\}")


def _texts(n: int, seed: int, max_frags: int = 10) -> list[str]:
  """Random texts over the fragment alphabet; half the fragments are boxes with random content
  (so every mode is often found, and first != last happens)."""
  rng = random.Random(seed)
  inner = ["0", "7", "12", "-", " ", "\n", ",", "x", "2147483648", "{", "\\boxed{", "+"]
  weights = [3, 3, 3, 2, 3, 1, 1, 1, 1, 1, 1, 1]
  out = []
  for _ in range(n):
    parts = []
    for _ in range(rng.randint(0, max_frags)):
      if rng.random() < 0.5:
        parts.append(rng.choice(FRAGMENTS))
      else:
        body = "".join(rng.choices(inner, weights, k=rng.randint(0, 4)))
        parts.append("\\boxed{" + body + ("}" if rng.random() < 0.9 else ""))
    out.append("".join(parts))
  return out


def _box_int(content: str) -> int | str:
  """``int(content.strip())`` in a try/except, as environments write it (`BOX_INVALID` when
  it raises); on these alphabets (no ``_``, ASCII) exactly the documented validity rule."""
  rule = re.fullmatch(r"[+-]?[0-9]+", content.strip(" \t\n\r\v\f"))
  try:
    v = int(content.strip())
  except ValueError:
    v = BOX_INVALID
  assert (rule is not None) == (v != BOX_INVALID), content
  return v


def _python_modes(text: str) -> list[int | str | None]:
  """What a translated environment computes: ``re.search`` (first) / ``re.findall`` (last) with
  a str pattern, ``int()`` of the group (saturated to int32, the documented choice)."""
  out: list[int | str | None] = [None] * N_ALT
  for g, pat in PY_GRAMMARS.items():
    rx = re.compile(r"\\boxed\{(" + pat + r")\}")
    m, all_ = rx.search(text), rx.findall(text)
    assert (m is None) == (not all_)
    if m:
      for last, v in ((0, m.group(1)), (1, all_[-1])):
        out[alt_index(g, last)] = min(max(int(v), -(2**31)), 2**31 - 1)
  m, all_ = PY_BOX.search(text), PY_BOX.findall(text)
  assert (m is None) == (not all_)
  if m:
    for last, v in ((0, _box_int(m.group(1))), (1, _box_int(all_[-1]))):
      out[alt_index(BOX, last)] = v if v == BOX_INVALID else min(max(v, -(2**31)), 2**31 - 1)
  return out


def _run(fn, seqs, width):
  ids = np.zeros((len(seqs), width), np.int32)
  lens = np.zeros(len(seqs), np.int32)
  for i, s in enumerate(seqs):
    assert len(s) <= width
    ids[i, : len(s)] = s
    lens[i] = len(s)
  out = jax.tree.map(np.asarray, fn(ids, lens))
  lists = [list(out.values[i][: out.count[i]]) if out.found[i] else None for i in range(len(seqs))]
  assert not np.any(out.alt_valid & ~out.alt_found)
  assert np.array_equal(out.alt_valid[:, : 2 * (BOX - 1)], out.alt_found[:, : 2 * (BOX - 1)])
  assert not np.any(out.alt_value[~out.alt_valid])
  modes = [
    [
      (int(out.alt_value[i, k]) if out.alt_valid[i, k] else BOX_INVALID)
      if out.alt_found[i, k]
      else None
      for k in range(N_ALT)
    ]
    for i in range(len(seqs))
  ]
  return lists, modes


def _parser(tables):
  return jax.jit(jax.vmap(lambda ids, n: parse_tokens(ids, n, tables, MAX_ITEMS)))


def test_reference_examples():
  i = alt_index
  bad = {i(BOX, 0): BOX_INVALID, i(BOX, 1): BOX_INVALID}
  cases = {
    "\\boxed{\\boxed{12}}": {i(g, k): 12 for g in (1, 2, 3, 4) for k in (0, 1)} | bad,
    "\\boxed{ 5}": {i(3, 0): 5, i(3, 1): 5, i(4, 0): 5, i(4, 1): 5, i(5, 0): 5, i(5, 1): 5},
    "\\boxed{-5}": {i(1, 0): -5, i(1, 1): -5, i(3, 0): -5, i(3, 1): -5, i(5, 0): -5, i(5, 1): -5},
    "\\boxed{5": {},
    "\\boxed{x}": bad,
    "\\boxed{ +7\n}": {i(5, 0): 7, i(5, 1): 7},
    "\\boxed{{3} \\boxed{+}": bad,
    "\\boxed{1}\\boxed{x\\boxed{2}": {i(g, k): k + 1 for g in (1, 2, 3, 4) for k in (0, 1)}
    | {i(5, 0): 1, i(5, 1): BOX_INVALID},
    "\\boxed{x\\boxed{2} \\boxed{3": {i(g, k): 2 for g in (1, 2, 3, 4) for k in (0, 1)} | bad,
    "First \\boxed{-3}, but finally \\boxed{4}": {
      i(5, 0): -3,
      i(5, 1): 4,
      i(1, 0): -3,
      i(1, 1): 4,
      i(2, 0): 4,
      i(2, 1): 4,
      i(3, 0): -3,
      i(3, 1): 4,
      i(4, 0): 4,
      i(4, 1): 4,
    },
    "\\boxed{2147483648} \\boxed{-2147483649}": {
      i(1, 0): 2**31 - 1,
      i(1, 1): -(2**31),
      i(2, 0): 2**31 - 1,
      i(2, 1): 2**31 - 1,
      i(3, 0): 2**31 - 1,
      i(3, 1): -(2**31),
      i(4, 0): 2**31 - 1,
      i(4, 1): 2**31 - 1,
      i(5, 0): 2**31 - 1,
      i(5, 1): -(2**31),
    },
  }
  for text, want in cases.items():
    assert parse_modes(text) == [want.get(k) for k in range(N_ALT)], text
    assert _python_modes(text) == parse_modes(text), text
  # the documented differences from int(): "_" separators are not accepted
  assert parse_modes("\\boxed{1_0}")[i(BOX, 0)] == BOX_INVALID and int("1_0") == 10
  assert GRAMMARS[0] is None and len(GRAMMAR_NAMES) == len(GRAMMARS) + 1 == 6
  assert GRAMMAR_NAMES[BOX] == "box"


def test_reference_equals_str_regexes_on_random_texts():
  for text in _texts(4000, seed=0):
    assert parse_modes(text) == _python_modes(text), text


def test_one_byte_per_token_agrees_with_python():
  """>= 4k random texts fed one byte per token: every mode equals Python, G0 unchanged."""
  vocab = [bytes([b]) for b in range(256)]
  fn = _parser(make_parse_tables(vocab))
  texts = _texts(4096, seed=1)
  seqs = [list(t.encode()) for t in texts]
  lists, modes = _run(fn, seqs, max(len(s) for s in seqs))
  hits, differ = np.zeros(N_ALT, int), np.zeros(N_ALT // 2, int)
  box_valid = np.zeros(2, int)
  for text, got_list, got in zip(texts, lists, modes):
    assert got == _python_modes(text), (text, got)
    assert got_list == parse_boxed(text, MAX_ITEMS), text
    hits += [v is not None for v in got]
    box_valid += [isinstance(v, int) for v in got[-2:]]
    differ += [got[k] != got[k + 1] for k in range(0, N_ALT, 2)]
  # every mode is found in a good share of the texts, and missed in others; first != last; a
  # box is valid in a good share of the texts and invalid in others
  assert np.all(hits > 0.1 * len(texts)) and np.all(hits < 0.9 * len(texts)), hits
  assert np.all(box_valid > 0.1 * len(texts)), box_valid
  assert np.all(box_valid < hits[-2:] - 0.1 * len(texts)), (box_valid, hits)
  assert np.all(differ > 0.05 * len(texts)), differ


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_tokenizer_chunks_agree_with_python(name):
  """The same texts as real multi-byte token sequences of the tiny / SmolLM2 tokenizers."""
  tok = tokenizer(name)
  fn = _parser(make_parse_tables(tok.token_bytes))
  texts = _texts(2048, seed=2)
  seqs = [tok.encode(t) for t in texts]
  data = [b"".join(tok.token_bytes[t] for t in s) for s in seqs]
  lists, modes = _run(fn, seqs, max(1, max(len(s) for s in seqs)))
  for d, got_list, got in zip(data, lists, modes):
    text = d.decode("utf-8")
    assert got == _python_modes(text), (text, got)
    assert got_list == parse_boxed(d, MAX_ITEMS), text


def test_random_chunk_vocabulary_reduced_equals_raw():
  """A synthetic vocabulary of random multi-byte chunks of the fragment alphabet (the
  reductions of `reduce_token` at work: ws/other runs, repeated classes, pattern letters):
  reduced and unreduced tables give the same modes, equal to Python."""
  rng = random.Random(5)
  alphabet = list(b"\\boxed{}-+, 0123456789\n\tx")
  vocab = [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(400)]
  vocab += [
    b"\\boxed{",
    b"ed{",
    b"\\b",
    b"oxed",
    b"}}}",
    b"{{{",
    b"---5",
    b"+5",
    b"++",
    b"   ",
    b" \t x ",
  ]
  vocab += [f.encode() for f in FRAGMENTS]
  reduced = make_parse_tables(vocab)
  width = max(len(b) for b in vocab)
  raw = np.zeros((len(vocab), width), np.int32)
  for i, b in enumerate(vocab):
    raw[i, : len(b)] = [reduce_token(bytes([c]))[0] for c in b]
  seqs = [[rng.randrange(len(vocab)) for _ in range(rng.randint(0, 16))] for _ in range(3000)]
  outs = [_run(_parser(t), seqs, 16) for t in (reduced, ParseTables(raw))]
  assert outs[0] == outs[1]
  for s, got in zip(seqs, outs[0][1]):
    assert got == _python_modes(b"".join(vocab[t] for t in s).decode()), s


def test_incremental_feed_and_text_action():
  vocab = [bytes([b]) for b in range(256)]
  tables = make_parse_tables(vocab)
  feed = jax.jit(lambda st, t: parse_feed(st, t, tables))
  for text in ["a \\boxed{ 3 } b \\boxed{-4} \\boxed{1,2}", "\\boxed{\\boxed{12}}"]:
    st = parse_init(MAX_ITEMS)
    for b in text.encode():
      st = feed(st, b)
    got = jax.tree.map(np.asarray, parse_result(st))
    want = text_action(text, CFG)
    for f in got._fields:
      assert np.array_equal(getattr(got, f), getattr(want, f)), (text, f)


def test_make_action_modes_are_those_of_a_boxed_int():
  for values in ([5], [-5], [1, 2], None, [0]):
    text = "nothing" if values is None else "\\boxed{" + ", ".join(map(str, values)) + "}"
    a, b = make_action(values, CFG), text_action(text, CFG)
    for f in a._fields:
      assert np.array_equal(getattr(a, f), getattr(b, f)), (values, f)


PROGRAM = """turns 3
reset
step
answer r0
{parse}obs "go"
case 1 0 go "ok"
"""


def test_interpreter_picks_the_mode_per_program():
  tok = tokenizer("tiny")
  modes = ["", "parse digits first\n", "parse signed last\n", "parse signed_ws first\n"]
  modes += ["parse box first\n", "parse box last\n"]
  progs = [assemble(PROGRAM.format(parse=m), tok) for m in modes]
  want_modes = [[0, 0], [2, 0], [1, 1], [3, 0], [5, 0], [5, 1]]
  assert [np.asarray(p.answer_mode).tolist() for p in progs] == want_modes
  env = ProgramEnv(CFG)
  texts = ["\\boxed{-3} then \\boxed{ 8 } then \\boxed{6} \\boxed{1, 2}", "\\boxed{x}"]
  texts += ["\\boxed{ +4 } \\boxed{x\\boxed{2}", "\\boxed{1, 2} \\boxed{-9\t}", "\\boxed{7", ""]
  n = len(progs)

  @jax.jit
  def run(programs, actions):
    keys = jax.random.split(jax.random.key(0), n)
    _, st = jax.vmap(env.reset)(keys, programs)
    return jax.vmap(env.transition)(keys, st, actions, programs)[1]

  for text in texts:
    act = text_action(text, CFG)
    actions = jax.tree.map(lambda x: np.stack([x] * n), act)
    st = jax.device_get(run(stack_programs(progs), actions))
    py = _python_modes(text)
    g0 = parse_boxed(text, MAX_ITEMS)
    want = [(g0 is not None, g0 or [])]  # (found, the ints the step sees)
    for g, last in want_modes[1:]:
      v = py[alt_index(g, last)]
      want.append((v is not None, [v] if isinstance(v, int) else []))
    for i, (found, w) in enumerate(want):
      regs = st.regs[i, CFG.n_regs :]
      lguess = st.lists[i, CFG.n_lists]
      assert bool(regs[SPECIAL_FOUND]) == found, (text, i)
      assert int(regs[SPECIAL_NGUESS]) == len(w), (text, i)
      assert int(regs[SPECIAL_GUESS]) == (0 if not w else w[0]), (text, i)
      assert lguess.tolist() == w + [0] * (CFG.list_len - len(w)), (text, i)
      assert int(st.list_len[i, CFG.n_lists]) == len(w), (text, i)
  # an Action without alt_* fields (hand-made): single-int modes see no answer
  bare = make_action([7], CFG)[:3]
  actions = jax.tree.map(lambda x: np.stack([x] * n), type(act)(*bare))
  st = jax.device_get(run(stack_programs(progs), actions))
  assert st.regs[:, CFG.n_regs + SPECIAL_FOUND].tolist() == [1, 0, 0, 0, 0, 0]
  # alt_found without alt_valid (older hand-made actions): valid = found
  old = text_action("\\boxed{x}", CFG)._replace(alt_valid=None)
  assert int(select_answer(old, np.array([5, 0])).count) == 1


def test_assembly_round_trip_and_errors():
  tok = tokenizer("tiny")
  for g in GRAMMAR_NAMES[1:]:
    for order in ("first", "last"):
      p = assemble(PROGRAM.format(parse=f"parse {g} {order}\n"), tok)
      text = disassemble(p, tok)
      assert f"parse {g} {order}\n" in text
      q = assemble(text, tok)
      assert all(np.array_equal(getattr(p, f), getattr(q, f)) for f in vars(p))
  plain = disassemble(assemble(PROGRAM.format(parse=""), tok), tok)
  assert "parse" not in plain
  for bad in ("parse list last\n", "parse digits\n", "parse digits middle\n", "parse 2 first\n"):
    with pytest.raises(AssemblyError, match="line 5"):
      assemble(PROGRAM.format(parse=bad), tok)


def test_answer_mode_checked_and_old_arrays_load():
  tok = tokenizer("tiny")
  p = assemble(PROGRAM.format(parse="parse digits_ws last\n"), tok)
  arrays = {k: np.asarray(v) for k, v in vars(p).items()}
  del arrays["answer_mode"]  # saved before the field existed
  old = program_from_arrays(arrays)
  assert np.asarray(old.answer_mode).tolist() == [0, 0]
  assert int(check_program(old, CFG, np)[0]) == 0
  modes = ([4, 1], True), ([5, 0], True), ([5, 1], True), ([0, 1], False), ([6, 0], False)
  for mode, ok in modes + (([1, 2], False), ([-1, 0], False)):
    arrays["answer_mode"] = np.array(mode, np.int32)
    q = program_from_arrays(arrays)
    assert (int(check_program(q, CFG, np)[0]) == 0) == ok, mode
    assert (int(check_program(jax.tree.map(jnp.asarray, q), CFG, jnp)[0]) == 0) == ok, mode
