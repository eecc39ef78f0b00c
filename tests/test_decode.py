"""The pure decode pieces: per-step cached logits against a full forward, the idle no-op, the
forced-token queue, processor updates, and a multi-turn loop built on device from
``decode_step`` / ``feed_arrays`` / ``finish_arrays`` equal to the host engine's."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from hf_fixtures import save_hf_model

from spade_jax.engine.decode import decode_step, decode_weights, feed_arrays, finish_arrays
from spade_jax.engine.generate import Engine, SamplingParams
from spade_jax.models import load_pretrained

LENGTHS = (3, 7, 12, 16)


@functools.cache
def _setup():
  path, _ = save_hf_model("qwen3")
  model, cfg = load_pretrained(path)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in LENGTHS]
  return model, cfg, prompts


@dataclasses.dataclass(frozen=True)
class CountTokens:
  """A processor that only counts what it is shown (sampled vs forced), never masks."""

  def init_state(self, batch):
    return {"sampled": jnp.zeros((batch,), jnp.int32), "forced": jnp.zeros((batch,), jnp.int32)}

  def mask(self, state, logits_BV):
    return logits_BV

  def update(self, state, token_B, was_sampled_B):
    return {"sampled": state["sampled"] + was_sampled_B, "forced": state["forced"] + ~was_sampled_B}


@functools.partial(jax.jit, static_argnums=(0, 4), donate_argnums=2)
def _step(graphdef, params, state, sampling, processor=None):
  return decode_step(graphdef, params, state, sampling, processor)


@functools.partial(jax.jit, static_argnums=0)
def _full(graphdef, params, tokens_1T):
  return nnx.merge(graphdef, params)(tokens_1T)[0]


def test_every_step_logits_equal_full_forward_and_idle_step_is_noop():
  model, cfg, prompts = _setup()
  graphdef, params = nnx.split(model)
  engine = Engine(model)
  state = engine.init(prompts, max_new_tokens=[24, 10, 24, 17], cache_size=128, seed=1)
  sampling = SamplingParams.make(4, temperature=[1.0, 0.8, 0.0, 1.2], top_k=[0, 50, 0, 0])
  seen = [[] for _ in prompts]  # logits after each token of the sequence (prompt's last on)
  for b in range(4):
    seen[b].append(np.asarray(state.logits_BV[b]))
  for _ in range(24):
    before = np.asarray(state.active_B())
    state = _step(graphdef, params, state, sampling)
    for b in np.flatnonzero(before):
      seen[b].append(np.asarray(state.logits_BV[b]))
  assert np.all(np.asarray(state.waiting_B)) and int(state.cache.index) == 16 + 24
  out = engine.outputs(state)
  assert [len(t) for t in out.tokens] == [24, 10, 24, 17]
  pad = 64  # compare right-padded full forwards (one compilation; causal, so exact)
  for b, (p, toks) in enumerate(zip(prompts, out.tokens)):
    seq = p + toks
    full = _full(graphdef, params, jnp.array([seq + [0] * (pad - len(seq))]))
    np.testing.assert_allclose(np.stack(seen[b]), full[len(p) - 1 : len(seq)], atol=1e-5, rtol=0)

  idle = jax.tree.map(np.asarray, state)
  state = _step(graphdef, params, state, sampling)  # nobody active: no slot used, no change
  for a, b in zip(jax.tree.leaves(jax.tree.map(np.asarray, state)), jax.tree.leaves(idle)):
    np.testing.assert_array_equal(a, b)


def test_forced_queue_appends_after_remaining_and_processor_sees_all_tokens():
  model, cfg, prompts = _setup()
  graphdef, params = nnx.split(model)
  proc = CountTokens()
  engine = Engine(model, processor=proc)
  state = engine.init(prompts, max_new_tokens=2, cache_size=128)
  sampling = SamplingParams.make(4, greedy=True)
  state = engine.run(state, sampling)  # 2 sampled tokens each, then waiting
  resume = jnp.array([True, True, False, False])
  tokens = jnp.array([[11, 12, 13], [21, 22, 0], [0, 0, 0], [0, 0, 0]])
  state = feed_arrays(state, resume, tokens, jnp.array([3, 2, 0, 0]), jnp.full((4,), 4))
  state = finish_arrays(state, jnp.array([False, False, False, True]))
  state = _step(graphdef, params, state, sampling, proc)  # consumes 11 and 21
  state = feed_arrays(state, resume, jnp.array([[14, 15, 0]] * 4), jnp.array([2, 1, 0, 0]))
  state = feed_arrays(state, jnp.array([False, False, False, True]), tokens, jnp.full((4,), 3))
  state = engine.run(state, sampling)
  out = engine.outputs(state)
  assert out.tokens[0][2:7] == [11, 12, 13, 14, 15] and len(out.tokens[0]) == 7 + 4
  assert out.tokens[1][2:5] == [21, 22, 14] and len(out.tokens[1]) == 5 + 4
  assert out.loss_mask[0] == [1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1]
  assert [len(t) for t in out.tokens[2:]] == [2, 2]  # waiting / finished: untouched
  assert out.stop_reason == ["length", "length", "length", "length"]
  counts = jax.tree.map(np.asarray, state.proc_state)
  np.testing.assert_array_equal(counts["sampled"], [6, 6, 2, 2])
  np.testing.assert_array_equal(counts["forced"], [5, 3, 0, 0])


def test_on_device_multi_turn_loop_equals_host_loop():
  model, cfg, prompts = _setup()
  graphdef, params = nnx.split(model)
  engine = Engine(model)
  sampling = SamplingParams.make(4, greedy=True)
  obs = [5, 6, 7, 8]

  @jax.jit
  def rollout(params, state):
    weights = decode_weights(graphdef, params)  # hoisted out of the loop
    obs_BF = jnp.broadcast_to(jnp.array(obs), (4, len(obs)))

    def body(carry):
      state, turns = carry
      state = decode_step(graphdef, params, state, sampling, weights=weights)
      ended = state.waiting_B & ~state.done_B
      turns = turns + ended
      state = feed_arrays(state, ended & (turns < 3), obs_BF, jnp.full((4,), len(obs)))
      state = finish_arrays(state, ended & (turns >= 3))
      return state, turns

    return jax.lax.while_loop(lambda c: jnp.any(c[1] < 3), body, (state, jnp.zeros(4, int)))[0]

  state = engine.init(prompts, max_new_tokens=3, cache_size=128)
  device = engine.outputs(rollout(params, state))

  state = engine.init(prompts, max_new_tokens=3, cache_size=128)
  for turn in range(3):
    state = engine.run(state, sampling)
    if turn < 2:
      state = engine.feed(state, range(4), [obs] * 4)
  host = engine.outputs(state)
  assert device.tokens == host.tokens
  assert device.loss_mask == host.loss_mask == [[1] * 3 + [0] * 4 + [1] * 3 + [0] * 4 + [1] * 3] * 4
  assert all(t[3:7] == obs and t[10:14] == obs for t in device.tokens)


def test_bfloat16_decode_weights_are_cast_once_and_change_nothing():
  """In a bfloat16-compute model over float32 master weights the decode weights hold the matrices in bfloat16 (what FSDP all-gathers
  then move), norms and the embedding table as they are; a decode step's logits equal those
  with the float32 matrices (every use casts them to bfloat16 anyway)."""
  path, _ = save_hf_model("qwen3")
  model, cfg = load_pretrained(path, dtype=jnp.bfloat16, param_dtype=jnp.float32)
  graphdef, params = nnx.split(model)
  weights = decode_weights(graphdef, params)
  layer = weights.layers[0]
  assert layer["q"].dtype == jnp.bfloat16 and layer["down"].dtype == jnp.bfloat16
  assert weights.unembed_DV.dtype == jnp.bfloat16
  assert layer["attn_norm"].dtype == jnp.float32 and weights.embed_VD.dtype == jnp.float32
  wide = dataclasses.replace(
    weights,
    layers=tuple(
      {n: model_w[i] for n, model_w in nnx.merge(graphdef, params).blocks.weights(cfg).items()}
      for i in range(cfg.num_layers)
    ),
    unembed_DV=nnx.merge(graphdef, params).unembed_matrix(),
  )
  assert wide.layers[0]["q"].dtype == jnp.float32
  engine = Engine(model)
  _, _, prompts = _setup()
  state = engine.init(prompts, max_new_tokens=4, cache_size=64, seed=1)
  sampling = SamplingParams.make(4, temperature=0.0)
  step = jax.jit(lambda w, s: decode_step(graphdef, params, s, sampling, weights=w))
  a = step(weights, jax.tree.map(jnp.copy, state))
  b = step(wide, jax.tree.map(jnp.copy, state))
  np.testing.assert_array_equal(np.asarray(a.logits_BV), np.asarray(b.logits_BV))
