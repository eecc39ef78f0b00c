"""The causal path of ``block.attention`` (``causal=True``: the full forward without a padding
mask, i.e. training and the GRPO update's log-probs) attends in causal query blocks: it gives
the same outputs and gradients as attending every query to every key under the causal mask,
computes markedly fewer FLOPs, and the model forward takes it exactly when no mask is given."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.models import Transformer, TransformerConfig, block

B, N, K, H = 2, 4, 2, 8
CFG = TransformerConfig(
  vocab_size=61,
  embed_dim=32,
  num_layers=2,
  num_heads=N,
  num_kv_heads=K,
  head_dim=H,
  mlp_dim=48,
  qk_norm=True,
  model_type="qwen3",
)


def _qkv(T):
  rng = np.random.default_rng(T)
  q = jnp.asarray(rng.standard_normal((B, T, N, H)), jnp.float32)
  k = jnp.asarray(rng.standard_normal((B, T, K, H)), jnp.float32)
  v = jnp.asarray(rng.standard_normal((B, T, K, H)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((B, T, N, H)), jnp.float32)
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
  return q, k, v, w, mask


def _loss(cfg, causal):
  def f(q, k, v, w, mask):
    return jnp.sum(block.attention(cfg, q, k, v, mask, causal=causal) * w)

  return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))


def test_block_size():
  assert block.causal_block_size(40, 512) == 64  # one block: T <= 64
  assert block.causal_block_size(192, 512) == 64  # 3 blocks
  assert block.causal_block_size(1024, 512) == 1024 // block.CAUSAL_MAX_BLOCKS
  assert block.causal_block_size(8192, 512) == 512  # the attention_chunk memory bound
  assert block.causal_block_size(150, 32) == 32
  assert block.causal_block_size(150, 0) == 64


@pytest.mark.parametrize("impl", ["reference", "xla"])
@pytest.mark.parametrize(
  "T,chunk",
  # one block; 64 + 64 + 22; five rematerialised blocks of 32; 38 chunks of 4 (over the unroll
  # limit: the masked chunks)
  [(40, 512), (150, 512), (150, 32), (150, 4)],
)
def test_causal_blocks_equal_full_causal_attention(impl, T, chunk):
  cfg = CFG.replace(attention_impl=impl, attention_chunk=chunk)
  args = _qkv(T)
  (loss_b, grads_b) = _loss(cfg, True)(*args)
  (loss_f, grads_f) = _loss(cfg, False)(*args)
  out_b = block.attention(cfg, *args[:3], args[4], causal=True)
  out_f = block.attention(cfg, *args[:3], args[4], causal=False)
  np.testing.assert_allclose(np.asarray(out_b), np.asarray(out_f), atol=1e-5, rtol=0)
  np.testing.assert_allclose(float(loss_b), float(loss_f), rtol=1e-5)
  for gb, gf in zip(grads_b, grads_f, strict=True):
    scale = float(jnp.max(jnp.abs(gf)))
    np.testing.assert_allclose(np.asarray(gb), np.asarray(gf), atol=1e-5 * scale, rtol=0)


def test_causal_blocks_skip_the_masked_scores():
  """At T=256 (four blocks of 64) the blocks compute 10 of the 16 score tiles: the whole
  forward+backward of the attention costs well under the full causal attention's FLOPs."""
  cfg = CFG.replace(attention_impl="reference", attention_chunk=512)
  args = _qkv(256)

  def flops(causal):
    cost = _loss(cfg, causal).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return cost["flops"]

  assert flops(True) < 0.75 * flops(False)


def test_model_forward_takes_the_causal_path_only_without_a_mask():
  """No ``mask_BT``: the blocked causal path; an all-ones mask: the plain masked path. Same
  logits, at a length that splits into blocks (and with a mask the path is unchanged)."""
  T = 150
  model = Transformer(CFG, rngs=nnx.Rngs(0))
  tokens = np.random.default_rng(1).integers(0, CFG.vocab_size, (B, T)).astype(np.int32)
  blocked = np.asarray(model(tokens))
  masked = np.asarray(model(tokens, mask_BT=jnp.ones((B, T), bool)))
  np.testing.assert_allclose(blocked, masked, atol=1e-5, rtol=0)
  hlo = jax.jit(lambda t: model(t)).lower(tokens).as_text()
  hlo_masked = jax.jit(lambda t: model(t, mask_BT=jnp.ones((B, T), bool))).lower(tokens).as_text()
  assert hlo.count("dot_general") > hlo_masked.count("dot_general")  # three blocks' dots


def test_past_the_unroll_limit_the_masked_chunks_run():
  """T=150 in chunks of 4 would be 38 unrolled blocks: the causal path lowers to the masked
  chunks (a loop over one chunk), the same program as ``causal=False``."""
  cfg = CFG.replace(attention_impl="reference", attention_chunk=4)
  args = _qkv(150)
  assert -(-150 // block.causal_block_size(150, 4)) > block.CAUSAL_UNROLL_LIMIT
  texts = [_loss(cfg, causal).lower(*args).as_text() for causal in (True, False)]
  assert texts[0].count("dot_general") == texts[1].count("dot_general")
  assert "while" in texts[0]
