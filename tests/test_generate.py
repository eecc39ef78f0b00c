"""Generation engine end to end: greedy parity with transformers' ``generate`` (tiny random
Qwen3 / Qwen2 / Llama, SmolLM2-135M from its GGUF), log-probs against a full forward, forced
tokens through the same KV cache, stop / length / cache-full endings, padding sides, chunked
prefill, constrained decoding, sharding on 8 fake devices, recompilation, bad input."""

import dataclasses
import functools
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hf_fixtures import save_hf_model
from jax.sharding import PartitionSpec as P

from spade_jax import sharding
from spade_jax.engine.generate import (
  Engine,
  SamplingParams,
  compilation_count,
  generate,
  tight_prompt_slots,
)
from spade_jax.engine.kv_cache import to_model_cache
from spade_jax.models import init_cache, load_pretrained, save_pretrained
from spade_jax.tokenizer import load_tokenizer

LENGTHS = (3, 7, 12, 16)  # one prompt bucket (16), cache bucket 128 for 64 new tokens


def _prompts(vocab, lengths=LENGTHS, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.integers(0, vocab, n).tolist() for n in lengths]


def _hf_greedy(hf, prompts, new, eos=None):
  """transformers' greedy generate, one unpadded prompt at a time (one torch thread: torch's
  thread pool slows down badly on a shared, oversubscribed CPU)."""
  out = []
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  try:
    with torch.no_grad():
      for p in prompts:
        ids = torch.tensor([p])
        gen = hf.generate(
          ids,
          attention_mask=torch.ones_like(ids),
          max_new_tokens=new,
          do_sample=False,
          eos_token_id=eos,
          pad_token_id=0,
        )
        out.append(gen[0, len(p) :].tolist())
  finally:
    torch.set_num_threads(threads)
  return out


@functools.cache
def _tiny(kind, seed=0):
  path, hf = save_hf_model(kind, seed=seed)
  model, cfg = load_pretrained(path)
  return model, cfg, hf


FULL = 128  # reference forwards run right-padded to this length: one compilation for all


@functools.partial(jax.jit, static_argnums=0)
def _full_forward(graphdef, params, tokens_1T):
  model = nnx.merge(graphdef, params)
  return model(tokens_1T, cache=init_cache(model.cfg, 1, FULL))


def _forward(model, seq):
  """Full causal forward (no cache) logits of ``seq``, and its K/V (``[L, T, K, H]``) as a single
  prefill writes them. Right padding never changes earlier positions of a causal model."""
  graphdef, params = nnx.split(model)
  tokens = jnp.array([list(seq) + [0] * (FULL - len(seq))])
  logits, cache = _full_forward(graphdef, params, tokens)
  n = len(seq)
  return (
    np.asarray(logits[0, :n], np.float64),
    np.asarray(cache.k_LBSKH[:, 0, :n]),
    np.asarray(cache.v_LBSKH[:, 0, :n]),
  )


@functools.cache
def _greedy_qwen3():
  model, cfg, hf = _tiny("qwen3")
  return generate(model, _prompts(cfg.vocab_size), max_new_tokens=64, greedy=True)


# ------------------------------------------------------------------------------ parity


@pytest.mark.parametrize("kind", ["qwen3", "qwen2", "llama"])
def test_greedy_matches_transformers(kind):
  model, cfg, hf = _tiny(kind)
  prompts = _prompts(cfg.vocab_size)
  out = (
    _greedy_qwen3() if kind == "qwen3" else generate(model, prompts, max_new_tokens=64, greedy=True)
  )
  assert out.tokens == _hf_greedy(hf, prompts, 64)
  assert out.stop_reason == ["length"] * 4 and out.finished == [False] * 4
  assert all(m == [1] * 64 for m in out.loss_mask)


@pytest.fixture(scope="module")
def smollm2():
  model, cfg = load_pretrained("smollm2")
  return model, cfg, load_tokenizer("smollm2")


def test_smollm2_greedy_matches_transformers(smollm2):
  from transformers import AutoModelForCausalLM

  model, cfg, tok = smollm2
  questions = [
    "Hi!",
    "Write a short poem about the sea, in four lines.",
    "List three prime numbers greater than ten and explain briefly why each is prime.",
  ]
  prompts = [tok.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
  assert len({len(p) for p in prompts}) == 3
  out = generate(model, prompts, max_new_tokens=32, greedy=True, stop_token_ids=tok.eos_ids)
  with tempfile.TemporaryDirectory() as d:
    save_pretrained(model, cfg, d)
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
  ref = _hf_greedy(hf, prompts, 32, eos=list(tok.eos_ids))
  for got, want, fin in zip(out.tokens, ref, out.finished):
    stops = [i for i, t in enumerate(want) if t in tok.eos_ids]
    want = want[: stops[0] + 1] if stops else want
    assert got == want
    assert fin == bool(stops)
  assert sum(len(t) for t in out.tokens) > 40  # real text, not immediate stops


# ------------------------------------------------------------------------------ log-probs


def test_logprobs_equal_full_forward_log_softmax():
  model, cfg, _ = _tiny("qwen3")
  prompts = _prompts(cfg.vocab_size)
  temps = [0.7, 0.0, 1.3, 1.0]
  out = generate(model, prompts, max_new_tokens=64, temperature=temps, top_p=0.9, top_k=20, seed=3)
  for p, toks, lps, t in zip(prompts, out.tokens, out.logprobs, temps):
    logits = _forward(model, p + toks)[0][len(p) - 1 : -1] / (t or 1.0)
    ref = jax.nn.log_softmax(logits, axis=-1)[np.arange(len(toks)), toks]
    np.testing.assert_allclose(lps, ref, atol=1e-5, rtol=0)
  greedy = _greedy_qwen3()
  assert out.tokens[1] == greedy.tokens[1]  # temperature 0 is greedy
  assert out.tokens[0] != greedy.tokens[0]


def test_seeded_sampling_reproducible_and_top_k_one_is_greedy():
  model, cfg, _ = _tiny("qwen3")
  prompts = _prompts(cfg.vocab_size)
  a = generate(model, prompts, max_new_tokens=64, temperature=1.0, seed=11)
  b = generate(model, prompts, max_new_tokens=64, temperature=1.0, seed=11)
  c = generate(model, prompts, max_new_tokens=64, temperature=1.0, seed=12)
  assert a.tokens == b.tokens and a.logprobs == b.logprobs
  assert a.tokens != c.tokens
  top1 = generate(model, prompts, max_new_tokens=64, temperature=0.8, top_k=1, seed=11)
  assert top1.tokens == _greedy_qwen3().tokens


# ------------------------------------------------------------------------------ forced tokens


def test_forced_tokens_share_the_cache_with_sampled_ones():
  model, cfg, _ = _tiny("qwen3")
  engine = Engine(model)
  prompts = _prompts(cfg.vocab_size)
  sampling = SamplingParams.make(4, temperature=[0.0, 1.0, 0.9, 1.0])
  state = engine.init(prompts, max_new_tokens=5, cache_size=128, seed=4)
  state = engine.run(state, sampling)  # A: 5 sampled tokens each, then waiting (length)
  assert np.all(np.asarray(state.waiting_B)) and int(state.step) == 5
  forced = {0: [5, 6, 7, 8], 2: [9, 10]}
  state = engine.feed(state, list(forced), list(forced.values()))
  state = engine.finish(state, [3])
  state = engine.run(state, sampling)  # F then B: 5 more sampled tokens
  out = engine.outputs(state)
  # finishing a waiting sequence keeps the reason its last turn ended
  assert out.stop_reason == ["length"] * 4
  np.testing.assert_array_equal(state.done_B, [False, False, False, True])
  assert [len(t) for t in out.tokens] == [14, 5, 12, 5]  # sequence 1 waits, 3 is finished
  cache = to_model_cache(state.cache)
  for b, f in forced.items():
    assert out.loss_mask[b] == [1] * 5 + [0] * len(f) + [1] * 5
    assert out.tokens[b][5 : 5 + len(f)] == f
    assert all(lp == 0.0 for lp in out.logprobs[b][5 : 5 + len(f)])
    seq = prompts[b] + out.tokens[b]
    logits, ref_k, ref_v = _forward(model, seq)
    np.testing.assert_allclose(state.logits_BV[b], logits[-1], atol=1e-5, rtol=0)
    valid = np.asarray(cache.valid_BS[b])
    np.testing.assert_allclose(np.asarray(cache.k_LBSKH[:, b])[:, valid], ref_k, atol=1e-5)
    np.testing.assert_allclose(np.asarray(cache.v_LBSKH[:, b])[:, valid], ref_v, atol=1e-5)
    t = sampling.temperature_B[b] if not sampling.greedy_B[b] else 1.0
    lp = jax.nn.log_softmax(logits[len(prompts[b]) - 1 : -1] / float(t), axis=-1)
    ref = np.asarray(lp)[np.arange(len(out.tokens[b])), out.tokens[b]]
    np.testing.assert_allclose(np.where(out.loss_mask[b], ref, 0.0), out.logprobs[b], atol=1e-5)


def test_feed_rejects_bad_requests():
  model, cfg, _ = _tiny("qwen3")
  engine = Engine(model)
  state = engine.init(_prompts(cfg.vocab_size), max_new_tokens=5, cache_size=128)
  with pytest.raises(ValueError, match="overflows"):
    engine.feed(state, [0], [[1] * (engine.queue_size + 1)])
  with pytest.raises(ValueError, match="vocabulary"):
    engine.feed(state, [0], [[cfg.vocab_size]])
  with pytest.raises(ValueError, match="distinct"):
    engine.feed(state, [0, 0], [[1], [2]])
  state = engine.finish(state, [1])
  with pytest.raises(ValueError, match="finished"):
    engine.feed(state, [1], [[1]])


# ------------------------------------------------------------------------------ endings, layout


def test_stop_tokens_and_cache_full():
  model, cfg, _ = _tiny("qwen3")
  prompts = _prompts(cfg.vocab_size)
  greedy = _greedy_qwen3().tokens
  stop = greedy[0][10]
  out = generate(model, prompts, max_new_tokens=64, greedy=True, stop_token_ids=[stop])
  for want, got, fin in zip(greedy, out.tokens, out.finished):
    cut = want.index(stop) + 1 if stop in want else len(want)
    assert got == want[:cut]
    assert fin == (stop in want)
  full = generate(model, prompts, max_new_tokens=500, greedy=True, cache_size=128)
  assert [t[:64] for t in full.tokens] == greedy
  assert [len(t) for t in full.tokens] == [128 - 16] * 4  # after 16 prompt slots
  assert full.stop_reason == ["cache_full"] * 4


def test_right_padding_and_chunked_prefill_match():
  model, cfg, _ = _tiny("qwen3")
  prompts = _prompts(cfg.vocab_size)
  want = _greedy_qwen3().tokens
  right = generate(model, prompts, max_new_tokens=64, greedy=True, pad_side="right")
  assert right.tokens == want
  engine = Engine(model, prefill_chunk=4)
  state = engine.init(prompts, max_new_tokens=64)
  out = engine.outputs(engine.run(state, SamplingParams.make(4, greedy=True)))
  assert out.tokens == want


def test_prompt_whose_bucket_fills_the_cache_is_still_prefilled_in_chunks():
  for longest, cache, max_chunk in [(22457, 32768, 512), (9, 10, 4), (7, 8, 512), (1, 2, 8)]:
    P, chunk = tight_prompt_slots(longest, cache, max_chunk)
    assert longest <= P < cache and P % chunk == 0 and chunk <= max_chunk
  assert tight_prompt_slots(22457, 32768, 512) == (22528, 512)
  assert tight_prompt_slots(9, 10, 4) == (9, 3)  # 12 would not fit: the largest chunk that does
  with pytest.raises(ValueError):
    tight_prompt_slots(10, 10, 4)
  # greedy tokens unchanged when the cache is just big enough for the prompt's bucket to overflow
  model, cfg, _ = _tiny("qwen3")
  prompts = _prompts(cfg.vocab_size)
  want = _greedy_qwen3().tokens
  engine = Engine(model, prefill_chunk=4, buckets=(128,))
  longest = max(len(p) for p in prompts)
  assert engine.bucket(longest) >= longest + 65  # the prompt's bucket alone fills the cache
  state = engine.init(prompts, max_new_tokens=64, cache_size=longest + 65)
  out = engine.outputs(engine.run(state, SamplingParams.make(4, greedy=True)))
  assert out.tokens == want


def test_padded_prompt_leaves_the_reply_its_room():
  # a cache of prompt + max_new_tokens slots: padding the prompt to its bucket (16) would leave
  # fewer than max_new_tokens slots, so the engine packs it tighter and the reply is whole
  model, cfg, _ = _tiny("qwen3")
  prompts = _prompts(cfg.vocab_size, lengths=(3, 7, 12, 13))
  engine = Engine(model, prefill_chunk=4)
  greedy = SamplingParams.make(4, greedy=True)
  want = engine.outputs(engine.run(engine.init(prompts, max_new_tokens=64), greedy))
  assert [len(t) for t in want.tokens] == [64] * 4
  assert engine.bucket(13) == 16
  state = engine.init(prompts, max_new_tokens=64, cache_size=13 + 64)
  out = engine.outputs(engine.run(state, greedy))
  assert out.tokens == want.tokens and "cache_full" not in out.stop_reason


@dataclasses.dataclass(frozen=True)
class EvenThenStop:
  """Allows only even token ids for the first ``n`` sampled tokens, then only ``stop``."""

  vocab: int
  stop: int
  n: int = 3

  def init_state(self, batch):
    return jnp.zeros((batch,), jnp.int32)

  def mask(self, count_B, logits_BV):
    ids = jnp.arange(self.vocab)
    allowed = jnp.where(count_B[:, None] < self.n, ids[None] % 2 == 0, ids[None] == self.stop)
    return jnp.where(allowed, logits_BV, -jnp.inf)

  def update(self, count_B, token_B, was_sampled_B):
    return count_B + was_sampled_B


def test_logits_processor_constrains_sampling():
  model, cfg, _ = _tiny("qwen3")
  proc = EvenThenStop(cfg.vocab_size, stop=1)
  out = generate(
    model,
    _prompts(cfg.vocab_size),
    max_new_tokens=64,
    temperature=1.0,
    stop_token_ids=[1],
    processor=proc,
    seed=2,
  )
  for toks in out.tokens:
    assert len(toks) == 4 and toks[-1] == 1
    assert all(t % 2 == 0 for t in toks[:3])
  assert out.finished == [True] * 4


# ------------------------------------------------------------------------------ sharding, params


def test_sharded_generation_equals_unsharded():
  model, cfg, _ = _tiny("qwen3")
  mesh = sharding.make_mesh((4, 1, 2))
  out = generate(model, _prompts(cfg.vocab_size), max_new_tokens=64, greedy=True, mesh=mesh)
  assert out.tokens == _greedy_qwen3().tokens
  engine = Engine(model, mesh=mesh)
  state = engine.init(_prompts(cfg.vocab_size), max_new_tokens=64)
  assert engine.params["blocks"]["k"].sharding.spec == P(None, None, "tensor", None)
  assert state.cache.k[0].sharding.spec == P("data", "tensor")
  assert state.tokens_BS.sharding.spec == P("data")


def test_new_params_and_same_bucket_do_not_recompile():
  model, cfg, _ = _tiny("qwen3")
  other, _, hf_other = _tiny("qwen3", seed=1)
  prompts = _prompts(cfg.vocab_size)
  engine = Engine(model)
  greedy = SamplingParams.make(4, greedy=True)
  engine.run(engine.init(prompts, max_new_tokens=64), greedy)
  before = compilation_count()
  _, other_params = nnx.split(other)
  state = engine.init(prompts, max_new_tokens=64, params=other_params)
  out = engine.outputs(engine.run(state, greedy, params=other_params))
  assert out.tokens == _hf_greedy(hf_other, prompts, 64)
  shorter = _prompts(cfg.vocab_size, lengths=(9, 2, 16, 5), seed=5)  # same buckets
  generate(model, shorter, max_new_tokens=60, temperature=0.5, top_p=0.8, top_k=7, seed=9)
  assert compilation_count() == before
  assert engine.metrics()["generate/compilations"] == before


def test_sampling_settings_seeds_and_repeated_calls_do_not_recompile():
  """Greedy, top-p alone (threshold search), SPADE's top-k/top-p, min-p and mixed rows run the
  same compiled programs: sampling settings are data, and both sampler paths are in them."""
  model, cfg, _ = _tiny("qwen3")
  prompts = _prompts(cfg.vocab_size)
  engine = Engine(model)
  engine.outputs(engine.run(engine.init(prompts, max_new_tokens=16), SamplingParams.make(4)))
  before = compilation_count()
  settings = [
    dict(greedy=True),
    dict(temperature=1.0, top_p=0.95),
    dict(temperature=0.6, top_p=0.95, top_k=20),
    dict(temperature=0.9, min_p=0.1, top_k=300),
    dict(temperature=[0.0, 1.0, 0.6, 1.3], top_p=[1.0, 0.9, 0.95, 1.0], top_k=[0, 0, 20, 7]),
  ]
  for seed, kw in enumerate(settings * 2):
    state = engine.init(prompts, max_new_tokens=12 + seed % 3, seed=seed)
    out = engine.outputs(engine.run(state, SamplingParams.make(4, **kw)))
    assert [len(t) for t in out.tokens] == [12 + seed % 3] * 4
  assert compilation_count() == before


# ------------------------------------------------------------------------------ bad input


def test_bad_input_raises_before_device_work():
  model, cfg, _ = _tiny("qwen3")
  before = compilation_count()
  ok = [[1, 2, 3]]
  cases = [
    (dict(prompts=[]), "empty"),
    (dict(prompts=[[1, 2], []]), "empty"),
    (dict(prompts=[[1, cfg.vocab_size]]), "vocabulary"),
    (dict(prompts=[[-1, 2]]), "vocabulary"),
    (dict(prompts=[list(range(40))], cache_size=32), "does not fit"),
    (dict(prompts=[[1] * (cfg.max_position + 1)]), "does not fit"),
    (dict(prompts=ok, max_new_tokens=0), "max_new_tokens"),
    (dict(prompts=ok, max_new_tokens=-3), "max_new_tokens"),
    (dict(prompts=ok, temperature=-0.5), "temperature"),
    (dict(prompts=ok, stop_token_ids=[cfg.vocab_size + 5]), "vocabulary"),
  ]
  for kw, msg in cases:
    kw = {"max_new_tokens": 8, **kw}
    with pytest.raises(ValueError, match=msg):
      generate(model, kw.pop("prompts"), **kw)
  assert compilation_count() == before
