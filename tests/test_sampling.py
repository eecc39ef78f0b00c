"""Sampler: parameter validation, greedy / top-k / top-p / min-p / temperature distributions on
hand-built logits, tie-breaking, reproducibility, and the recorded log-prob convention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.engine.sampling import SamplingParams, token_logprobs
from spade_jax.engine.sampling import choose_tokens as _choose_tokens

choose_tokens = jax.jit(_choose_tokens)

PROBS = np.array([0.5, 0.3, 0.15, 0.05])
N = 6000  # samples per distribution check


def _draw(probs, seed=0, **kw):
  """N independent draws (one per batch row) from logits log(probs); returns frequencies."""
  logits = jnp.log(jnp.asarray(np.tile(probs, (N, 1)), jnp.float32))
  tokens = choose_tokens(jax.random.key(seed), logits, SamplingParams.make(N, **kw))
  return np.bincount(np.asarray(tokens), minlength=len(probs)) / N


def _assert_freqs(freqs, expected):
  expected = np.asarray(expected, float)
  np.testing.assert_array_equal(freqs[expected == 0], 0.0)  # truncated tokens never appear
  sigma = np.sqrt(expected * (1 - expected) / N)
  assert np.all(np.abs(freqs - expected) <= 4.5 * sigma + 1e-9), (freqs, expected)


def test_make_validates_and_broadcasts():
  sp = SamplingParams.make(3, temperature=[0.0, 0.5, 1.0], top_k=2)
  np.testing.assert_array_equal(sp.greedy_B, [True, False, False])  # temperature 0 = greedy
  np.testing.assert_array_equal(sp.top_k_B, [2, 2, 2])
  for bad in (
    dict(temperature=-0.1),
    dict(temperature=float("nan")),
    dict(top_p=0.0),
    dict(top_p=1.5),
    dict(top_k=-1),
    dict(min_p=1.5),
    dict(min_p=-0.1),
    dict(temperature=[1.0, 1.0]),
  ):
    with pytest.raises(ValueError):
      SamplingParams.make(3, **bad)


def test_plain_sampling_follows_softmax():
  _assert_freqs(_draw(PROBS), PROBS)


def test_temperature_sharpens_as_specified():
  expected = PROBS**2 / np.sum(PROBS**2)  # softmax(log p / 0.5)
  _assert_freqs(_draw(PROBS, temperature=0.5), expected)


@pytest.mark.parametrize(
  "top_p, support",
  [
    (0.5, [0]),  # mass before token 1 is exactly 0.5: not < 0.5, so token 0 alone
    (0.7, [0, 1]),  # 0.5 < 0.7 keeps token 1; 0.8 >= 0.7 drops token 2
    (0.81, [0, 1, 2]),
    (1.0, [0, 1, 2, 3]),
  ],
)
def test_top_p_keeps_smallest_prefix_reaching_p(top_p, support):
  expected = np.zeros(4)
  expected[support] = PROBS[support] / PROBS[support].sum()
  _assert_freqs(_draw(PROBS, top_p=top_p), expected)


def test_top_k_then_top_p_on_renormalised_set():
  # top-2 renormalised is [0.625, 0.375]: mass before token 1 is 0.625 >= 0.6, so only token 0
  # survives (top-p on the original distribution would have kept token 1: 0.5 < 0.6).
  _assert_freqs(_draw(PROBS, top_k=2, top_p=0.6), [1, 0, 0, 0])
  _assert_freqs(_draw(PROBS, top_k=2), [0.625, 0.375, 0, 0])


def test_min_p_relative_to_best_token():
  # keep p >= 0.5 * 0.5 = 0.25
  _assert_freqs(_draw(PROBS, min_p=0.5), [0.625, 0.375, 0, 0])


def test_top_k_one_equals_greedy_and_greedy_ignores_key():
  logits = jax.random.normal(jax.random.key(1), (64, 50))
  greedy = choose_tokens(jax.random.key(2), logits, SamplingParams.make(64, greedy=True))
  np.testing.assert_array_equal(greedy, np.argmax(np.asarray(logits), axis=-1))
  top1 = choose_tokens(jax.random.key(3), logits, SamplingParams.make(64, top_k=1, temperature=1.7))
  np.testing.assert_array_equal(top1, greedy)
  again = choose_tokens(jax.random.key(4), logits, SamplingParams.make(64, greedy=True))
  np.testing.assert_array_equal(again, greedy)


def test_ties_break_towards_lower_id():
  logits = jnp.array([[0.0, 2.0, 2.0, 1.0]] * 8)
  for kw in (dict(greedy=True), dict(top_k=1), dict(top_p=0.1)):
    np.testing.assert_array_equal(
      choose_tokens(jax.random.key(0), logits, SamplingParams.make(8, **kw)), [1] * 8
    )


def test_seeded_sampling_is_reproducible_and_per_sequence_params_mix():
  logits = jax.random.normal(jax.random.key(1), (32, 100))
  sp = SamplingParams.make(32, temperature=[1.0] * 16 + [0.0] * 16, top_p=0.9)
  a = choose_tokens(jax.random.key(7), logits, sp)
  b = choose_tokens(jax.random.key(7), logits, sp)
  c = choose_tokens(jax.random.key(8), logits, sp)
  np.testing.assert_array_equal(a, b)
  assert np.any(np.asarray(a)[:16] != np.asarray(c)[:16])
  np.testing.assert_array_equal(np.asarray(a)[16:], np.argmax(np.asarray(logits)[16:], -1))


def test_logprobs_are_temperature_scaled_and_untruncated():
  logits = jax.random.normal(jax.random.key(5), (4, 30)) * 3
  tokens = jnp.array([0, 5, 7, 29])
  sp = SamplingParams.make(4, temperature=[0.7, 0.7, 0.0, 2.0], top_k=3, top_p=0.5)
  got = token_logprobs(logits, tokens, sp)
  temps = np.array([0.7, 0.7, 1.0, 2.0])[:, None]  # greedy rows use temperature 1
  ref = jax.nn.log_softmax(np.asarray(logits, np.float64) / temps, axis=-1)
  np.testing.assert_allclose(got, np.asarray(ref)[np.arange(4), tokens], atol=1e-5)


def _sorted_reference(scaled, top_k, top_p, min_p):
  """The kept set by the definition: a stable sort by value (ties: lower id first), top-k, top-p
  on the renormalised top-k set (exclusive cumulative mass < p), min-p, the best token always."""
  B, V = scaled.shape
  keep = np.zeros((B, V), bool)
  for b in range(B):
    order = np.argsort(-scaled[b], kind="stable")
    vals = scaled[b][order].astype(np.float64)
    k = top_k[b] if 0 < top_k[b] < V else V
    in_k = np.arange(V) < k
    e = np.where(in_k, np.exp(vals - vals[0]), 0.0)
    probs = e / e.sum()
    kept = in_k & ((np.cumsum(probs) - probs < top_p[b]) | (top_p[b] >= 1.0))
    kept &= probs >= min_p[b] * probs[0]
    kept[0] = True
    keep[b, order] = kept
  return keep


def _truncation_cases(seed, B=48, V=1000):
  rng = np.random.default_rng(seed)
  scale = rng.choice([0.3, 1.0, 3.0, 8.0], size=(B, 1))  # flat to peaked
  logits = rng.normal(size=(B, V)) * scale
  ties = rng.random(B) < 0.5  # half the rows on a coarse grid: many tied values
  logits[ties] = np.round(logits[ties] * 2) / 2
  logits[0] = 0.0  # all tied
  logits[1, rng.random(V) < 0.3] = -np.inf  # processor-masked tokens
  top_k = rng.choice([0, 0, 1, 5, 20, 64, 65, 300, V - 1, V, 5000], size=B)
  top_p = rng.choice([1.0, 1.0, 0.95, 0.5, 0.9, 0.999, 0.2], size=B)
  min_p = rng.choice([0.0, 0.0, 0.0, 0.05, 0.3], size=B)
  return logits.astype(np.float32), top_k, top_p.astype(np.float32), min_p.astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_set_without_sort_equals_sort_reference(seed):
  """Both sort-free paths (top_k candidates; threshold search over the vocabulary) keep exactly
  the tokens the sort-based definition keeps, ties, -inf and the off values included."""
  from spade_jax.engine.sampling import _keep_by_search, _keep_in_candidates, kept_tokens

  logits, top_k, top_p, min_p = _truncation_cases(seed)
  B, V = logits.shape
  sp = SamplingParams.make(B, temperature=1.0, top_k=top_k, top_p=top_p, min_p=min_p)
  ref = _sorted_reference(logits, top_k, top_p, min_p)
  x = jnp.asarray(logits)
  np.testing.assert_array_equal(np.asarray(jax.jit(_keep_by_search)(x, sp)), ref)
  np.testing.assert_array_equal(np.asarray(jax.jit(kept_tokens)(x, sp)), ref)
  _, ids, keep, exact = (np.asarray(a) for a in jax.jit(_keep_in_candidates)(x, sp))
  assert np.all(exact[(top_k > 0) & (top_k <= 64)])  # SPADE's top-k 20 never searches
  for b in np.flatnonzero(exact):
    got = np.zeros(V, bool)
    got[ids[b][keep[b]]] = True
    np.testing.assert_array_equal(got, ref[b], err_msg=f"row {b}")
  # rows whose set fits the candidates all at once take the candidate path of kept_tokens
  rows = np.flatnonzero(exact)
  sub = SamplingParams.make(
    len(rows), top_k=top_k[rows], top_p=top_p[rows], min_p=min_p[rows], temperature=1.0
  )
  np.testing.assert_array_equal(np.asarray(jax.jit(kept_tokens)(x[rows], sub)), ref[rows])


def test_sampling_off_values_keep_everything_and_boundary_ties_go_to_lower_ids():
  from spade_jax.engine.sampling import _keep_by_search, kept_tokens

  V = 200
  logits = np.zeros((4, V), np.float32)
  logits[:, 10:20] = 1.0  # ten tied best tokens, then 190 tied at 0
  sp = SamplingParams.make(4, top_k=[0, 0, 15, 0], top_p=[1.0, 0.999999, 1.0, 1.0])
  for fn in (kept_tokens, _keep_by_search):
    keep = np.asarray(jax.jit(fn)(jnp.asarray(logits), sp))
    assert keep[0].all() and keep[1].all() and keep[3].all()  # off, near-off, off
    np.testing.assert_array_equal(np.flatnonzero(keep[2]), [0, 1, 2, 3, 4, *range(10, 20)])
  # top-p boundary inside a tie group: e^1 / Z per best token; keep the lowest ids first
  probs = np.exp(logits[0].astype(np.float64)) / np.exp(logits[0].astype(np.float64)).sum()
  p = probs[10] * 3.5  # mass before the 4th tied token is 3 * q < p, before the 5th 4q >= p
  sp = SamplingParams.make(1, top_p=p)
  for fn in (kept_tokens, _keep_by_search):
    keep = np.asarray(jax.jit(fn)(jnp.asarray(logits[:1]), sp))[0]
    np.testing.assert_array_equal(np.flatnonzero(keep), [10, 11, 12, 13])


def test_searched_path_samples_the_kept_set():
  """A flat distribution with top-p only (the kept set does not fit the candidates) samples by
  threshold search: every draw in the kept set, frequencies by the renormalised softmax."""
  V = 300
  probs = np.linspace(1.0, 2.0, V)
  probs /= probs.sum()
  top_p = 0.9
  ref = _sorted_reference(np.log(probs)[None].astype(np.float32), [0], [top_p], [0.0])[0]
  assert ref.sum() > 64
  freqs = _draw(probs, top_p=top_p)
  expected = np.where(ref, probs, 0.0) / probs[ref].sum()
  np.testing.assert_array_equal(freqs[~ref], 0.0)
  bins = np.arange(V) // 30  # ten bins: enough draws in each for the 4.5-sigma check
  _assert_freqs(np.bincount(bins, freqs), np.bincount(bins, expected))
