"""``attention_impl``: the model forward, chunked prefill + greedy decode and the gradient are
the same under ``"xla"`` (``jax.nn.dot_product_attention``) as under ``"reference"`` (einsum +
softmax) for a GQA Qwen3 with left and right padding; the cuDNN argument mapping is checked on
CPU by routing it to XLA; ``"cudnn"`` without a GPU and unknown values fail clearly."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.engine.generate import Engine, SamplingParams
from spade_jax.models import Transformer, TransformerConfig, block, from_hf_config
from spade_jax.rl import losses
from spade_jax.spade.config import base_config, check_config

B, T = 3, 19
CFG = TransformerConfig(
  vocab_size=97,
  embed_dim=32,
  num_layers=2,
  num_heads=6,
  num_kv_heads=2,  # GQA, 3 query heads per kv head
  head_dim=8,
  mlp_dim=48,
  qk_norm=True,
  model_type="qwen3",
  attention_chunk=8,  # T=19 runs in 3 query chunks (the last one padded)
)


@functools.cache
def _split(impl: str, dtype=jnp.float32):
  """The same random parameters (seed 1) under ``impl``."""
  return nnx.split(Transformer(CFG.replace(attention_impl=impl, dtype=dtype), rngs=nnx.Rngs(1)))


@functools.partial(jax.jit, static_argnums=0)
def _logits(graphdef, params, tokens, positions, mask):
  return nnx.merge(graphdef, params)(tokens, positions, mask_BT=mask)


def _batch(side: str | None):
  """Tokens, RoPE positions and validity of prompts of lengths 19, 11, 4 padded on ``side``
  (None: no mask at all, every row full)."""
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, CFG.vocab_size, (B, T)).astype(np.int32)
  if side is None:
    return tokens, None, None
  valid = np.zeros((B, T), bool)
  positions = np.zeros((B, T), np.int32)
  for b, n in enumerate((T, 11, 4)):
    cols = slice(T - n, T) if side == "left" else slice(0, n)
    valid[b, cols] = True
    positions[b, cols] = np.arange(n)
  return tokens, positions, valid


@pytest.mark.parametrize("side", [None, "left", "right"])
def test_xla_forward_equals_reference(side):
  tokens, positions, valid = _batch(side)
  ref = np.asarray(_logits(*_split("reference"), tokens, positions, valid))
  got = np.asarray(_logits(*_split("xla"), tokens, positions, valid))
  rows = np.ones((B, T), bool) if valid is None else valid
  np.testing.assert_allclose(got[rows], ref[rows], atol=1e-5, rtol=0)
  np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)  # padded rows too: the same mask


@pytest.mark.parametrize("pad_side", ["left", "right"])
def test_chunked_prefill_then_greedy_decode_same_tokens(pad_side):
  prompts = [list(range(5, 24)), [7, 3, 9, 11, 2, 40, 41], [13]]
  outs, first = {}, {}
  for impl in ("reference", "xla"):
    model = nnx.merge(*_split(impl))
    engine = Engine(model, prefill_chunk=4)  # 16 prompt slots: 4 chunks into the cache
    state = engine.init(prompts, max_new_tokens=12, pad_side=pad_side)
    first[impl] = np.asarray(state.logits_BV)
    outs[impl] = engine.outputs(engine.run(state, SamplingParams.make(3, greedy=True))).tokens
  np.testing.assert_allclose(first["xla"], first["reference"], atol=1e-5, rtol=0)
  assert outs["xla"] == outs["reference"]
  assert [len(t) for t in outs["xla"]] == [12] * 3


def test_policy_gradient_equal():
  tokens, _, _ = _batch(None)
  loss_mask = np.random.default_rng(1).random((B, T)) < 0.7
  adv = jnp.asarray([1.0, -0.5, 0.25])
  lcfg = losses.LossConfig()

  def loss(params, graphdef):
    logp, _ = losses.model_logprobs(nnx.merge(graphdef, params), tokens, lcfg)
    return -jnp.sum(logp * loss_mask * adv[:, None]) / loss_mask.sum()

  grads = {}
  for impl in ("reference", "xla"):
    graphdef, params = _split(impl)
    grads[impl] = jax.jit(jax.grad(loss), static_argnums=1)(params, graphdef)
  leaves = jax.tree.leaves_with_path(grads["reference"])
  for (path, ref), got in zip(leaves, jax.tree.leaves(grads["xla"]), strict=True):
    scale = float(np.abs(ref).max()) or 1.0
    np.testing.assert_allclose(got, ref, atol=1e-5 * scale, rtol=0, err_msg=str(path))


def test_cudnn_argument_mapping_through_xla(monkeypatch):
  """The arguments the "cudnn" branch passes (``is_causal`` for the unpadded full forward,
  the boolean mask for padding and prefill chunks) mean the same attention: run them through
  XLA's implementation of the same semantics and compare with the reference."""
  calls = []
  real = jax.nn.dot_product_attention

  def fake(*args, implementation=None, **kw):
    assert implementation == "cudnn"
    calls.append("causal" if kw.get("is_causal") else "mask")
    assert kw.get("is_causal") != (kw.get("mask") is not None)
    return real(*args, implementation="xla", **kw)

  forward = jax.jit(_logits.__wrapped__, static_argnums=0)  # traced here, under the patches
  monkeypatch.setattr(block, "resolve_attention_impl", lambda cfg: "cudnn")
  monkeypatch.setattr(jax.nn, "dot_product_attention", fake)
  for side in (None, "left"):
    tokens, positions, valid = _batch(side)
    ref = np.asarray(_logits(*_split("reference"), tokens, positions, valid))
    got = np.asarray(forward(*_split("cudnn"), tokens, positions, valid))
    rows = np.ones((B, T), bool) if valid is None else valid
    np.testing.assert_allclose(got[rows], ref[rows], atol=1e-5, rtol=0)
  assert calls == ["causal", "mask"]  # one trace of the scanned block per forward


def test_cudnn_without_gpu_is_a_clear_error_and_auto_falls_back():
  if jax.default_backend() == "gpu":
    pytest.skip("a GPU is present")
  tokens, _, _ = _batch(None)
  with pytest.raises(ValueError, match="attention_impl='cudnn' cannot run here: .*CUDA GPU"):
    nnx.merge(*_split("cudnn"))(tokens)
  cfg = CFG.replace(attention_impl="auto")
  assert block.resolve_attention_impl(cfg) == "xla"
  ref = np.asarray(_logits(*_split("reference"), tokens, None, None))
  np.testing.assert_allclose(_logits(*_split("auto"), tokens, None, None), ref, atol=1e-5)


def test_invalid_value_is_a_config_error():
  with pytest.raises(ValueError, match="attention_impl must be one of .*got 'flash'"):
    CFG.replace(attention_impl="flash")
  c = base_config()
  check_config(c)
  assert c.model.attention_impl == "reference"
  c.model.attention_impl = "flash"
  with pytest.raises(ValueError, match="model.attention_impl='flash'") as e:
    check_config(c)
  assert "\n" not in str(e.value)


_HF = {
  "model_type": "qwen3",
  "vocab_size": 97,
  "hidden_size": 32,
  "num_hidden_layers": 2,
  "num_attention_heads": 6,
  "num_key_value_heads": 2,
  "head_dim": 8,
  "intermediate_size": 48,
}


def test_hf_config_override_and_round_trip():
  cfg = from_hf_config(_HF, attention_impl="xla")
  assert cfg.attention_impl == "xla"
  assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
  assert from_hf_config(_HF).attention_impl == "reference"


def test_run_config_reaches_the_model_config(monkeypatch):
  """``--config.model.attention_impl=xla`` reaches `load_pretrained` through `load_policy`."""
  import types

  from spade_jax import models, runner, tokenizer

  seen = {}

  def fake_load(path, **kw):
    seen.update(kw)
    return None, from_hf_config(_HF, attention_impl=kw["attention_impl"])

  monkeypatch.setattr(models, "load_pretrained", fake_load)
  monkeypatch.setattr(tokenizer, "load_tokenizer", lambda path: types.SimpleNamespace(vocab_size=5))
  c = base_config()
  c.model.attention_impl = "xla"
  _, cfg, _ = runner.load_policy(c, None)
  assert seen["attention_impl"] == "xla" and cfg.attention_impl == "xla"
