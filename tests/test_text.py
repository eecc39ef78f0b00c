"""Template rendering on device equals `tokenizer.encode` of the same string."""

from __future__ import annotations

import dataclasses
import random

import jax
import numpy as np
import pytest
from envs_fixtures import tokenizer

from spade_jax.envs.ir.program import DEFAULT_CONFIG, empty_program, program_from_arrays
from spade_jax.envs.ir.text import (
  TemplateError,
  compile_template,
  items_text,
  render,
  render_host,
  template_items,
  tokenizer_constants,
)

CFG = DEFAULT_CONFIG
TEMPLATES = [
  [("text", "Pick between "), ("reg", 0), ("text", " and "), ("reg", 1), ("text", ".")],
  [("reg", 0), ("reg", 1)],  # adjacent slots, no text at all
  [("text", "List: "), ("list", 0), ("text", "; maybe empty: "), ("list", 1), ("text", "!")],
  [("text", "\\boxed{"), ("list", 0), ("text", "}")],  # "{}" merges when the list is empty
  [("text", "Ünïcödé 🎲 x="), ("reg", 2), ("text", "\n\nHINT: ")],
  [("text", "a=-"), ("reg", 0), ("text", ",  "), ("reg", 33), ("text", "<|im_end|>")],
  [("text", "value:"), ("reg", 3), ("text", ","), ("list", 2), ("text", "|"), ("list", 4)],
  [("text", "Only text, no numbers at all.")],
]


def _value(rng):
  r = rng.random()
  if r < 0.5:
    return rng.randint(-120, 120)
  if r < 0.7:
    return rng.choice([0, -1, 2**31 - 1, -(2**31), 10, -10, 1000000])
  return rng.randint(-(2**31), 2**31 - 1)


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def compiled(request):
  tok = tokenizer(request.param)
  arrays = empty_program(CFG)
  consts = tokenizer_constants(tok, CFG)
  arrays.update(consts)
  for t, items in enumerate(TEMPLATES):
    tpl = compile_template(items, tok, CFG, consts)
    for key, field in (
      ("ids", "tpl_ids"),
      ("len", "tpl_len"),
      ("slots", "tpl_slots"),
      ("tail", "tpl_tail"),
      ("tail_len", "tpl_tail_len"),
    ):
      arrays[field][t] = tpl[key]
  return tok, program_from_arrays(arrays), consts


def test_render_equals_encode_for_random_values(compiled):
  tok, program, consts = compiled
  rng = random.Random(len(tok.token_bytes))
  n = 256
  regs = np.array([[_value(rng) for _ in range(CFG.n_regfile)] for _ in range(n)], np.int32)
  lens = np.array(
    [
      [rng.choice([0, 1, 3, rng.randint(0, CFG.list_len)]) for _ in range(CFG.n_listfile)]
      for _ in range(n)
    ],
    np.int32,
  )
  lists = np.array(
    [[[_value(rng) for _ in range(CFG.list_len)] for _ in range(CFG.n_listfile)] for _ in range(n)],
    np.int32,
  )
  fn = jax.jit(
    jax.vmap(
      jax.vmap(
        lambda t, r, li, ln: render(program, t, r, li, ln, CFG), in_axes=(0, None, None, None)
      ),
      in_axes=(None, 0, 0, 0),
    )
  )
  (out, cut) = jax.tree.map(np.asarray, fn(np.arange(len(TEMPLATES)), regs, lists, lens))
  assert not cut.any()
  for i in range(n):
    lv = [list(lists[i, j, : lens[i, j]]) for j in range(CFG.n_listfile)]
    for t, items in enumerate(TEMPLATES):
      text = items_text(items, regs[i], lv)
      want = tok.encode(text)
      got = list(out.ids[i, t, : out.length[i, t]])
      assert got == want, (text, got, want)
      assert np.all(out.ids[i, t, out.length[i, t] :] == 0)
      tpl = {
        k: np.asarray(getattr(program, f))[t]
        for k, f in (
          ("ids", "tpl_ids"),
          ("len", "tpl_len"),
          ("slots", "tpl_slots"),
          ("tail", "tpl_tail"),
          ("tail_len", "tpl_tail_len"),
        )
      }
      if i < 8:
        assert render_host(tpl, regs[i], lv, consts) == want
      assert tok.decode(got) == text


def test_template_items_inverts_compilation(compiled):
  tok, program, _ = compiled
  for t, items in enumerate(TEMPLATES):
    assert template_items(program, t, tok) == items


def test_long_output_is_cut_and_flagged(compiled):
  tok, program, _ = compiled
  if tok is not tokenizer("tiny"):
    pytest.skip("tokenizer-independent; run once")
  regs = np.zeros(CFG.n_regfile, np.int32)
  lists = np.tile(np.arange(100, 100 + CFG.list_len, dtype=np.int32), (CFG.n_listfile, 1))
  lens = np.full(CFG.n_listfile, CFG.list_len, np.int32)
  full, cut_full = render(program, 2, regs, lists, lens, CFG)
  short, cut = render(program, 2, regs, lists, lens, CFG, out_len=8)
  assert bool(cut) and not bool(cut_full)
  assert int(short.length) == 8 and short.ids.shape == (CFG.obs_len,)
  np.testing.assert_array_equal(np.asarray(short.ids)[:8], np.asarray(full.ids)[:8])
  assert not np.asarray(short.ids)[8:].any()
  small = dataclasses.replace(CFG, obs_len=8, feedback_len=8)
  assert int(render(program, 2, regs, lists, lens, small)[0].length) == 8


def _no_digit_split_tokenizer():
  """A byte-level BPE that merges digit pairs (like GPT-2): on-device digit rendering cannot
  match it, and compilation must say so."""
  from tokenizers import Tokenizer as HFTok
  from tokenizers import decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast

  from spade_jax.tokenizer import Tokenizer

  tok = HFTok(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  corpus = [" ".join(str(i) for i in range(k, k + 50)) for k in range(0, 2000, 50)] * 5
  trainer = trainers.BpeTrainer(
    vocab_size=400,
    special_tokens=["<|end|>"],
    show_progress=False,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
  )
  tok.train_from_iterator(corpus, trainer=trainer)
  return Tokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>"))


def test_tokenizer_without_digit_splitting_is_rejected_at_build_time():
  tok = _no_digit_split_tokenizer()
  assert len(tok.encode("42")) == 1  # the premise: digits merge
  consts = tokenizer_constants(tok, CFG)  # single digits are still single tokens
  with pytest.raises(TemplateError, match="tokenizer.encode gives"):
    compile_template([("text", "n = "), ("reg", 0)], tok, CFG, consts)


def test_context_spanning_an_empty_list_is_caught():
  """With SmolLM2, "," + (empty list) + "-5" encodes "," and "-" as one token: two slots with
  no text between them cannot be rendered per slot, and compilation must refuse."""
  tok = tokenizer("smollm2")
  consts = tokenizer_constants(tok, CFG)
  with pytest.raises(TemplateError, match="tokenizer.encode gives"):
    compile_template([("text", "x,"), ("list", 0), ("reg", 1)], tok, CFG, consts)


def test_size_limits_are_errors():
  tok = tokenizer("tiny")
  consts = tokenizer_constants(tok, CFG)
  with pytest.raises(TemplateError, match="number slots"):
    compile_template([("reg", 0)] * (CFG.tpl_slots + 1), tok, CFG, consts)
  with pytest.raises(TemplateError, match="literal tokens"):
    compile_template([("text", "word " * CFG.tpl_tokens)], tok, CFG, consts)
