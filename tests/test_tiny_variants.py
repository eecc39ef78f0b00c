"""Difficulty variants of the library's training families (the warm start's spread)."""

from __future__ import annotations

import jax
import pytest

from spade_jax.envs.library import FAMILIES
from spade_jax.tiny.heldout import HELDOUT_FAMILIES
from spade_jax.tiny.language import TINY_CONFIG, Language, tiny_library
from spade_jax.tiny.tokenizer import load_tiny_tokenizer
from spade_jax.tiny.variants import checked_variants, library_variants, variant_params

TRAIN = sorted(set(FAMILIES) - set(HELDOUT_FAMILIES))


@pytest.fixture(scope="module")
def lang_tok():
  tok = load_tiny_tokenizer()
  return Language.make(tok, TINY_CONFIG, max_tokens=160), tok


def test_knobs_are_the_integer_parameters_but_turns():
  base, knobs = variant_params("arith_chain")
  assert base["n_terms"] == 2 and base["ops"] == "+" and base["max_turns"] == 3
  assert set(knobs) == {"n_terms", "max_value"}
  assert "distinct" not in variant_params("mastermind")[1]  # a bool is not a knob


def test_variants_spread_around_the_easiest_level_and_avoid_library_settings(lang_tok):
  lang, _ = lang_tok
  vs = library_variants(lang, TRAIN, 8, seed=0, hints="answer")
  assert vs == library_variants(lang, TRAIN, 8, seed=0, hints="answer")  # deterministic
  assert vs != library_variants(lang, TRAIN, 8, seed=1, hints="answer")
  assert {v.family for v in vs} <= set(TRAIN) and len({v.family for v in vs}) >= len(TRAIN) - 1
  # the library in the same hint form, so equal tokens would mean an equal setting
  library = {tuple(t) for *_, t in tiny_library(lang, "answer")}
  by_family = {}
  for v in vs:
    base, knobs = variant_params(v.family)
    for k in knobs:
      assert -(-base[k] // 2) <= v.params[k] <= 2 * base[k], (v.family, k, v.params[k])
    assert len(v.tokens) <= lang.max_tokens and v.tokens[-1] == lang.end_id
    assert v.tokens not in library
    assert "The answer is " in lang.decode(list(v.tokens))
    by_family.setdefault(v.family, []).append(v.tokens)
  for name, toks in by_family.items():
    assert len(toks) == len(set(toks)) <= 8, name
  assert max(len(t) for t in by_family.values()) == 8
  assert library_variants(lang, TRAIN, 0, seed=0) == []


def test_checked_variants_keep_feasible_programs_only(lang_tok):
  lang, tok = lang_tok
  vs = library_variants(lang, ["arith_chain", "guess_number"], 3, seed=0)
  kept = checked_variants(lang, tok, vs, jax.random.PRNGKey(0))
  assert [v for v, _ in kept] == vs  # the generators' programs are feasible
  # a variant whose answer never wins is dropped
  broken = lang.decode(list(vs[0].tokens)).replace(" 1000 stop", " 0 stop", 1)
  bad = type(vs[0])(vs[0].family, vs[0].params, tuple(lang.encode(broken)))
  kept = checked_variants(lang, tok, [bad, *vs[1:]], jax.random.PRNGKey(0))
  assert [v for v, _ in kept] == vs[1:]
