"""Chunked forced-token consumption and chunked prefill equal their one-token-per-step originals."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.engine.chunk import chunk_prefill, chunk_step, chunkable
from spade_jax.engine.decode import decode_step, feed_arrays, finish_arrays, prefill
from spade_jax.engine.generate import Engine, SamplingParams
from spade_jax.models import Transformer, TransformerConfig

B, S, P, W = 4, 128, 32, 8


@dataclasses.dataclass(frozen=True)
class CountTokens:
  """A processor that records how many sampled / forced tokens it saw, and their sum."""

  def init_state(self, batch):
    z = jnp.zeros((batch,), jnp.int32)
    return {"sampled": z, "forced": z, "forced_sum": z}

  def mask(self, state, logits_BV):
    return logits_BV

  def update(self, state, token_B, was_sampled_B):
    return {
      "sampled": state["sampled"] + was_sampled_B,
      "forced": state["forced"] + ~was_sampled_B,
      "forced_sum": state["forced_sum"] + jnp.where(was_sampled_B, 0, token_B),
    }


@functools.cache
def _model(kind: str):
  extra = dict(qk_norm=True) if kind == "qwen3" else dict(qkv_bias=True, tie_embeddings=True)
  cfg = TransformerConfig(
    vocab_size=97,
    embed_dim=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    mlp_dim=48,
    model_type=kind,
    **extra,
  )
  model = Transformer(cfg, rngs=nnx.Rngs(1))
  if kind == "qwen2":  # non-zero biases, so the bias path is really tested
    for name in ("q_bias", "k_bias", "v_bias"):
      p = getattr(model.blocks, name)
      p.value = 0.3 * jax.random.normal(jax.random.key(3), p.value.shape)
  return model


def _prompts(lens=(5, P, 17, 1)):
  rng = np.random.default_rng(0)
  tokens = np.zeros((B, P), np.int32)
  valid = np.zeros((B, P), bool)
  positions = np.zeros((B, P), np.int32)
  for b, n in enumerate(lens):  # left-padded
    tokens[b, P - n :] = rng.integers(1, 97, n)
    valid[b, P - n :] = True
    positions[b, P - n :] = np.arange(n)
  return tokens, valid, positions


@pytest.mark.parametrize(
  "kind, lens",
  # the second batch's first 15 slots are padding in every row: its first chunk is skipped
  [("qwen3", (5, P, 17, 1)), ("qwen2", (5, P, 17, 1)), ("qwen3", (5, 9, 17, 1))],
)
def test_chunk_prefill_equals_prefill(kind, lens):
  graphdef, params = nnx.split(_model(kind))
  tokens, valid, positions = _prompts(lens)
  args = (jnp.full((B,), 9), -jnp.ones((B, 2), jnp.int32), jax.random.PRNGKey(0))
  ref = prefill(
    graphdef, params, tokens, valid, positions, jnp.full((B,), P - 1), *args,
    cache_size=S, chunk=P, queue_size=16,
  )  # fmt: skip
  got = chunk_prefill(
    graphdef, params, tokens, valid, positions, *args, cache_size=S, width=W, queue_size=16
  )
  np.testing.assert_allclose(got.logits_BV, ref.logits_BV, atol=2e-5, rtol=0)
  valid_BS = np.asarray(ref.cache.valid_BS)  # padding slots are never attended: any value
  for a, b in zip(got.cache.k, ref.cache.k):  # [B, K, H, S]
    np.testing.assert_allclose(
      *(np.where(valid_BS[:, None, None], x, 0) for x in (a, b)), atol=2e-5
    )
  for a, b in zip(got.cache.v, ref.cache.v):  # [B, K, S, H]
    np.testing.assert_allclose(
      *(np.where(valid_BS[:, None, :, None], x, 0) for x in (a, b)), atol=2e-5
    )
  same = ("tokens_BS", "positions_B", "max_new_B", "stop_ids_BK", "queue_BQ", "prompt_slots")
  for name in same:
    np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)
  np.testing.assert_array_equal(got.cache.valid_BS, ref.cache.valid_BS)
  assert int(got.cache.index) == int(ref.cache.index) == P
  with pytest.raises(ValueError, match="multiple"):
    chunk_prefill(
      graphdef, params, tokens, valid, positions, *args, cache_size=S, width=5, queue_size=4
    )


@functools.partial(jax.jit, static_argnums=(0, 3))
def _single(graphdef, params, state, proc):
  sampling = SamplingParams.make(B, greedy=True)
  return decode_step(graphdef, params, state, sampling, proc)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _chunked(graphdef, params, state, proc):
  sampling = SamplingParams.make(B, greedy=True)
  return jax.lax.cond(
    chunkable(state, W),
    lambda s: chunk_step(graphdef, params, s, W, proc),
    lambda s: decode_step(graphdef, params, s, sampling, proc),
    state,
  )


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
def test_chunk_step_equals_single_steps(kind):
  """Two rounds of feedback (lengths 21, 3, 9 and 0 / finished) then greedy answers: the chunked
  loop gives every sequence the same tokens, masks, positions, processor view and answers."""
  model = _model(kind)
  graphdef, params = nnx.split(model)
  proc = CountTokens()
  engine = Engine(model, processor=proc)
  sampling = SamplingParams.make(B, greedy=True)
  rng = np.random.default_rng(1)
  feeds = [rng.integers(1, 97, (B, 24)).astype(np.int32) for _ in range(2)]
  lens = np.array([21, 3, 9, 0])
  outs, steps = [], []
  for step_fn in (_single, _chunked):
    state = engine.init([[5, 6, 7], [8] * 9, [9, 10], [11] * 4], max_new_tokens=3, cache_size=S)
    state = engine.run(state, sampling)  # 3 greedy tokens each, then waiting
    n = 0
    for feed in feeds:
      state = feed_arrays(state, jnp.asarray(lens > 0), feed, lens)
      state = finish_arrays(state, jnp.asarray(lens == 0))
      while bool(jnp.any(state.active_B())):
        state = step_fn(graphdef, params, state, proc)
        n += 1
    outs.append((engine.outputs(state), state))
    steps.append(n)
  (a, sa), (b, sb) = outs
  assert a.tokens == b.tokens and a.loss_mask == b.loss_mask
  for x, y in zip(a.logprobs, b.logprobs):
    np.testing.assert_allclose(x, y, atol=2e-5)
  assert a.tokens[0][3:24] == feeds[0][0, :21].tolist() and len(a.tokens[3]) == 3
  np.testing.assert_array_equal(sa.positions_B, sb.positions_B)
  for k in ("sampled", "forced", "forced_sum"):
    np.testing.assert_array_equal(sa.proc_state[k], sb.proc_state[k], err_msg=k)
  assert sa.proc_state["forced"].tolist() == [42, 6, 18, 0]
  assert steps[1] < steps[0] - 10  # the chunks saved steps
