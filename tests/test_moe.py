"""Qwen3-MoE: logit parity with transformers (expert counts, top-k 1/2/8, norm_topk_prob both
ways, dense layers mixed in), the load-balancing aux loss, greedy KV-cache decode vs the full
forward, the HF export round trip, and the forward sharded over 8 fake devices."""

import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hf_fixtures import save_hf_model

from spade_jax import sharding
from spade_jax.engine.generate import generate
from spade_jax.models import load_pretrained, save_pretrained
from spade_jax.models.moe import load_balancing_loss

CONFIGS = {
  "e4_top2_norm": {},
  "e8_top1": dict(num_experts=8, num_experts_per_tok=1, norm_topk_prob=False),
  "e8_top8": dict(num_experts=8, num_experts_per_tok=8, norm_topk_prob=False),
  "e8_top2_mixed": dict(
    num_experts=8, num_hidden_layers=4, mlp_only_layers=[0], decoder_sparse_step=2
  ),
}
_CACHE = {}


def _pair(name):
  if name not in _CACHE:
    path, hf = save_hf_model("qwen3_moe", seed=1, **CONFIGS[name])
    model, cfg = load_pretrained(path)
    _CACHE[name] = (path, hf, model, cfg)
  return _CACHE[name]


def _tokens(cfg, B=2, T=11, seed=0):
  return np.random.default_rng(seed).integers(0, cfg.vocab_size, (B, T))


def _hf_forward(hf, tokens, mask=None):
  with torch.no_grad():
    ids = torch.tensor(tokens)
    am = None if mask is None else torch.tensor(mask, dtype=torch.long)
    return hf(ids, attention_mask=am, output_router_logits=True)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_aux_loss_match_transformers(name):
  _, hf, model, cfg = _pair(name)
  assert cfg.model_type == "qwen3_moe" and cfg.num_experts == hf.config.num_experts
  assert cfg.sparse_layers == tuple(
    i not in hf.config.mlp_only_layers and (i + 1) % hf.config.decoder_sparse_step == 0
    for i in range(cfg.num_layers)
  )
  tokens = _tokens(cfg)
  ref = _hf_forward(hf, tokens)
  logits, router = model.router_logits(jnp.asarray(tokens))
  np.testing.assert_allclose(np.asarray(logits), ref.logits.numpy(), atol=1e-4, rtol=0)
  sparse = [i for i, s in enumerate(cfg.sparse_layers) if s]
  ref_router = np.stack([r.numpy().reshape(router.shape[1:]) for r in ref.router_logits])
  np.testing.assert_allclose(np.asarray(router)[sparse], ref_router, atol=1e-5)
  assert np.std(ref_router) > 0.05  # a random router: routing really differs between tokens
  aux = load_balancing_loss(cfg, router)
  np.testing.assert_allclose(float(aux), float(ref.aux_loss), rtol=1e-5)
  assert cfg.router_aux_loss_coef == hf.config.router_aux_loss_coef
  np.testing.assert_allclose(np.asarray(model(jnp.asarray(tokens))), np.asarray(logits))


def test_aux_loss_with_padding_matches_transformers():
  _, hf, model, cfg = _pair("e8_top2_mixed")
  tokens = _tokens(cfg, seed=3)
  mask = np.ones(tokens.shape, bool)
  mask[0, :4] = False  # left padding
  ref = _hf_forward(hf, tokens, mask)
  _, router = model.router_logits(jnp.asarray(tokens), mask_BT=jnp.asarray(mask))
  aux = load_balancing_loss(cfg, router, jnp.asarray(mask))
  np.testing.assert_allclose(float(aux), float(ref.aux_loss), rtol=1e-5)
  # the loss is differentiable w.r.t. the router weights
  grads = jax.grad(lambda r: load_balancing_loss(cfg, r, jnp.asarray(mask)))(router)
  assert float(jnp.abs(grads).sum()) > 0


@pytest.mark.parametrize("name", ["e4_top2_norm", "e8_top2_mixed"])
def test_greedy_kv_cache_decode_matches_full_forward(name):
  _, _, model, cfg = _pair(name)
  prompts = [p.tolist() for p in _tokens(cfg, B=2, T=5, seed=7)]
  prompts[1] = prompts[1][:3]
  new = 8
  out = generate(model, prompts, max_new_tokens=new, greedy=True)
  width = max(map(len, prompts)) + new
  forward = jax.jit(lambda t: model(t))  # causal: the zeros after the sequence do not matter
  for prompt, gen in zip(prompts, out.tokens, strict=True):
    seq = list(prompt)
    for _ in range(new):  # the reference: argmax of the full (uncached) forward
      padded = jnp.asarray([seq + [0] * (width - len(seq))])
      seq.append(int(jnp.argmax(forward(padded)[0, len(seq) - 1])))
    assert gen == seq[len(prompt) :]


def test_export_round_trip():
  from transformers import AutoModelForCausalLM

  path, hf, model, cfg = _pair("e8_top2_mixed")
  out = tempfile.mkdtemp(prefix="spade_moe_export_")
  save_pretrained(model, cfg, out)
  reloaded, cfg2 = load_pretrained(out)
  assert cfg2 == cfg
  tokens = _tokens(cfg, seed=5)
  np.testing.assert_array_equal(
    np.asarray(reloaded(jnp.asarray(tokens))), np.asarray(model(jnp.asarray(tokens)))
  )
  hf2 = AutoModelForCausalLM.from_pretrained(out).eval()
  with torch.no_grad():
    ref = hf(torch.tensor(tokens)).logits.numpy()
    again = hf2(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_array_equal(again, ref)


def test_sharded_forward_matches_unsharded():
  path, _, model, cfg = _pair("e8_top2_mixed")
  tokens = jnp.asarray(_tokens(cfg, B=4, seed=9))
  expected_logits, expected_router = model.router_logits(tokens)
  mesh = sharding.make_mesh((2, 2, 2))
  sharded, _ = load_pretrained(path, mesh=mesh)
  spec = sharded.blocks.moe_gate[...].sharding.spec
  assert spec[1] == "fsdp" and spec[3] == "tensor"  # [L, E, D, F]: experts over fsdp
  with sharding.use_mesh(mesh):
    logits, router = jax.jit(lambda t: sharded.router_logits(t))(tokens)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(expected_logits), atol=1e-5)
  np.testing.assert_allclose(np.asarray(router), np.asarray(expected_router), atol=1e-5)
