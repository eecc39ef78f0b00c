"""The grammar mask: library programs are accepted token by token; random sampling under the
mask always gives programs that parse and end within budget; forced tokens do not advance it."""

from __future__ import annotations

import collections
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.envs.ir.assembly import assemble
from spade_jax.envs.ir.program import EnvProgram
from spade_jax.tiny.assemble import N_PARSE
from spade_jax.tiny.grammar import GrammarMask, check_tokens, tables
from spade_jax.tiny.language import REASONS, TINY_CONFIG, Language, assemble_tokens, tiny_library
from spade_jax.tiny.tokenizer import load_tiny_tokenizer

EXTRA_VOCAB = 7  # the model's logits may be wider than the tokenizer (padded vocabulary)


@pytest.fixture(scope="module")
def tok():
  return load_tiny_tokenizer()


def _walk(mask: GrammarMask, tokens_BT, sampled_BT):
  """Feeds token rows through the processor; per step the logits mask and whether the token
  fed was allowed. Rows are fed as sampled where ``sampled_BT``, forced otherwise."""
  B, T = tokens_BT.shape
  V = mask.lang.vocab_size + EXTRA_VOCAB

  def step(st, x):
    tok_B, sampled_B = x
    masked_BV = mask.mask(st, jnp.zeros((B, V)))
    allowed_B = jnp.isfinite(jnp.take_along_axis(masked_BV, tok_B[:, None], 1)[:, 0])
    return mask.update(st, tok_B, sampled_B), (allowed_B, jnp.isfinite(masked_BV).sum(1))

  return jax.lax.scan(step, mask.init_state(B), (tokens_BT.T, sampled_BT.T))


def test_library_programs_are_accepted_token_by_token(tok):
  lang = Language.make(tok, max_tokens=256)
  lib = tiny_library(lang)
  T = max(len(t) for *_, t in lib)
  tokens = np.zeros((len(lib), T), np.int32)
  sampled = np.zeros((len(lib), T), bool)
  for i, (*_, t) in enumerate(lib):
    tokens[i, : len(t)], sampled[i, : len(t)] = t, True
  mask = GrammarMask(lang)
  st, (allowed, n_allowed) = jax.jit(_walk, static_argnums=0)(mask, tokens, sampled)
  allowed, sampled = np.asarray(allowed).T, sampled
  for i, (name, level, t) in enumerate(lib):
    assert allowed[i, : len(t)].all(), (name, level, np.argmin(allowed[i, : len(t)]))
    assert check_tokens(lang, t) == (0, len(t) - 1)
  assert (np.asarray(st["q"]) == tables(lang).done).all()
  assert (np.asarray(st["n"]) == [len(t) for *_, t in lib]).all()
  assert (np.asarray(n_allowed) >= 1).all()
  # the same tokens fed as forced (a prefilled or queued prompt) leave the state untouched
  st_forced, _ = jax.jit(_walk, static_argnums=0)(mask, tokens, np.zeros_like(sampled))
  init = mask.init_state(len(lib))
  assert all(np.array_equal(st_forced[k], init[k]) for k in init)


def _sample(mask: GrammarMask, key, B: int):
  """``B`` programs sampled from random logits under the mask (jit)."""
  lang = mask.lang
  V = lang.vocab_size + EXTRA_VOCAB

  def step(carry, k):
    st, finished = carry
    k1, k2 = jax.random.split(k)
    masked = mask.mask(st, 3.0 * jax.random.normal(k1, (B, V)))
    token = jax.random.categorical(k2, masked).astype(jnp.int32)
    st = mask.update(st, token, ~finished)
    out = jnp.where(finished, 0, token)
    return (st, finished | (token == lang.end_id)), (out, jnp.isfinite(masked).sum(1))

  carry = (mask.init_state(B), jnp.zeros((B,), bool))
  keys = jax.random.split(key, lang.max_tokens + 8)  # more steps than the budget
  (_, finished), (tokens, n_allowed) = jax.lax.scan(step, carry, keys)
  return tokens.T, finished, n_allowed.min()


@pytest.mark.parametrize("budget", [40, 160])
def test_random_samples_are_well_formed_and_end_within_budget(tok, budget):
  lang = Language.make(tok, max_tokens=budget)
  mask = GrammarMask(lang)
  assert hash(mask) == hash(GrammarMask(lang)) and mask == GrammarMask(lang)
  tokens, finished, min_allowed = jax.jit(_sample, static_argnums=(0, 2))(
    mask, jax.random.PRNGKey(budget), 200
  )
  tokens = np.asarray(tokens)
  assert bool(finished.all()) and int(min_allowed) >= 1
  ends = np.argmax(tokens == lang.end_id, axis=1)
  assert (ends < budget).all() and (tokens[np.arange(200), ends] == lang.end_id).all()
  assert (tokens[np.arange(tokens.shape[1])[None, :] > ends[:, None]] == 0).all()
  programs, ok, reason = jax.device_get(assemble_tokens(lang, tokens))
  assert (reason == 0).sum() + (reason >= N_PARSE).sum() == 200, collections.Counter(
    REASONS[r] for r in reason
  )
  print(f"budget {budget}: {ok.mean():.3f} of the samples pass check_program")
  assert ok.mean() >= 0.9
  # exactness on arbitrary programs: device arrays == host assembly of the decoded text
  for i in np.flatnonzero(ok)[:8]:
    host = assemble(lang.decode(tokens[i]), tok, TINY_CONFIG)
    for f in dataclasses.fields(EnvProgram):
      assert np.array_equal(np.asarray(getattr(programs, f.name))[i], getattr(host, f.name))
    assert lang.encode(lang.decode(tokens[i])) == tokens[i, : ends[i] + 1].tolist()
