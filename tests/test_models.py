"""Model parity against transformers' PyTorch models, round trip, sharding, broken checkpoints."""

import json
import shutil
import tempfile
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hf_fixtures import make_hf_model, save_hf_model

from spade_jax import sharding
from spade_jax.models import (
  CheckpointError,
  Transformer,
  TransformerConfig,
  from_hf_config,
  load_pretrained,
  save_pretrained,
)

KINDS = ["qwen3", "qwen2", "llama", "llama_tied"]


def _hf_logits(hf_model, tokens):
  with torch.no_grad():
    return hf_model(torch.tensor(np.asarray(tokens))).logits.float().numpy()


@pytest.fixture(scope="module", params=KINDS)
def checkpoint(request):
  path, hf_model = save_hf_model(request.param, seed=KINDS.index(request.param))
  yield request.param, path, hf_model
  shutil.rmtree(path, ignore_errors=True)


def test_logit_parity_float32(checkpoint):
  kind, path, hf_model = checkpoint
  model, cfg = load_pretrained(path)
  assert cfg.model_type == kind.split("_")[0]
  tokens = np.random.RandomState(1).randint(0, cfg.vocab_size, (3, 23))  # prime length
  ours = np.asarray(model(tokens))
  ref = _hf_logits(hf_model, tokens)
  assert ours.shape == (3, 23, cfg.vocab_size)
  np.testing.assert_array_less(np.abs(ours - ref).max(), 1e-4)


def test_config_features_are_exercised(checkpoint):
  kind, path, _ = checkpoint
  _, cfg = load_pretrained(path)
  if kind == "qwen3":
    assert cfg.qk_norm and not cfg.tie_embeddings
    assert cfg.head_dim != cfg.embed_dim // cfg.num_heads
    assert cfg.num_heads // cfg.num_kv_heads == 3
  elif kind == "qwen2":
    assert cfg.qkv_bias and cfg.tie_embeddings
  else:
    assert cfg.rope_theta != 10000.0
    assert cfg.tie_embeddings == (kind == "llama_tied")
  assert cfg.vocab_size % 2 == 1  # odd vocabularies


def test_round_trip_through_transformers(checkpoint, tmp_path):
  from transformers import AutoModelForCausalLM

  kind, path, hf_model = checkpoint
  model, cfg = load_pretrained(path)
  out = save_pretrained(model, cfg, tmp_path / "export")
  reloaded = AutoModelForCausalLM.from_pretrained(str(out)).eval()
  tokens = np.random.RandomState(2).randint(0, cfg.vocab_size, (2, 11))
  np.testing.assert_array_equal(_hf_logits(reloaded, tokens), _hf_logits(hf_model, tokens))
  again, cfg2 = load_pretrained(out)
  assert cfg2 == cfg
  np.testing.assert_array_equal(np.asarray(again(tokens)), np.asarray(model(tokens)))


def test_cached_forward_matches_full_forward():
  path, _ = save_hf_model("qwen3", seed=5)
  model, cfg = load_pretrained(path)
  from spade_jax.models import init_cache

  tokens = np.random.RandomState(3).randint(0, cfg.vocab_size, (2, 12))
  full = np.asarray(model(tokens))
  cache = init_cache(cfg, batch=2, size=16)
  logits_a, cache = model(tokens[:, :7], cache=cache)
  logits_b, cache = model(tokens[:, 7:], cache=cache)
  np.testing.assert_allclose(np.concatenate([logits_a, logits_b], 1), full, atol=1e-5)
  assert int(cache.index) == 12 and bool(cache.valid_BS[:, :12].all())
  assert not bool(cache.valid_BS[:, 12:].any())


def test_left_padded_cache_prefill_matches_unpadded():
  path, _ = save_hf_model("llama", seed=6)
  model, cfg = load_pretrained(path)
  from spade_jax.models import init_cache

  short = np.random.RandomState(4).randint(0, cfg.vocab_size, (1, 5))
  pad = 3
  tokens = np.concatenate([np.zeros((1, pad), int), short], 1)
  positions = np.concatenate([np.zeros((1, pad), int), np.arange(5)[None]], 1)
  mask = np.concatenate([np.zeros((1, pad), bool), np.ones((1, 5), bool)], 1)
  logits, _ = model(tokens, positions, cache=init_cache(cfg, 1, 8), mask_BT=mask)
  np.testing.assert_allclose(np.asarray(logits)[:, pad:], np.asarray(model(short)), atol=1e-5)


@pytest.fixture(scope="module")
def smollm2():
  model, cfg = load_pretrained("smollm2")
  return model, cfg


def test_smollm2_gguf_parity(smollm2):
  from transformers import AutoModelForCausalLM

  from spade_jax.models import smollm2_gguf_path
  from spade_jax.tokenizer import load_tokenizer

  model, cfg = smollm2
  assert (cfg.num_layers, cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads) == (30, 576, 9, 3)
  tok = load_tokenizer("smollm2")
  prompt = tok.apply_chat_template(
    [{"role": "user", "content": "What is 17 + 25? Answer in \\boxed{}."}]
  )
  gguf = smollm2_gguf_path()
  hf_model = AutoModelForCausalLM.from_pretrained(
    str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
  ).eval()
  tokens = np.asarray([prompt])
  ours = np.asarray(model(tokens))
  ref = _hf_logits(hf_model, tokens)
  assert np.abs(ours - ref).max() <= 2e-3
  np.testing.assert_array_equal(ours.argmax(-1), ref.argmax(-1))


@pytest.mark.parametrize("mesh_shape", [(2, 2, 2), (1, 8, 1)])
def test_sharded_logits_equal_unsharded(mesh_shape):
  path, _ = save_hf_model("qwen3", seed=7)
  mesh = sharding.make_mesh(mesh_shape)
  model, cfg = load_pretrained(path)
  sharded, _ = load_pretrained(path, mesh=mesh)
  tokens = np.random.RandomState(5).randint(0, cfg.vocab_size, (8, 9))
  ref = np.asarray(model(tokens))
  graphdef, state = nnx.split(sharded)

  @jax.jit
  def fwd(state, tokens):
    return nnx.merge(graphdef, state)(tokens)

  with sharding.use_mesh(mesh):
    out = fwd(state, tokens)
  np.testing.assert_allclose(np.asarray(out), ref, atol=1e-5)
  # parameters are really distributed according to the rules table
  q = sharded.blocks.q[...]  # [L, D, N, H]: embed->fsdp, heads->tensor
  assert q.sharding.spec == jax.sharding.PartitionSpec(
    None, "fsdp" if mesh_shape[1] > 1 else None, "tensor" if mesh_shape[2] > 1 else None, None
  )
  emb = sharded.embed[...]  # [V=1031 (prime), D=64]: vocab not divisible -> replicated
  assert emb.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp")
  down = sharded.blocks.down[...]  # [L, F, D]
  assert down.sharding.spec[2] == "fsdp"
  assert len(q.addressable_shards) == 8
  shard_shape = q.addressable_shards[0].data.shape
  assert shard_shape[1] == cfg.embed_dim // mesh_shape[1]


def test_create_sharded_random_init():
  cfg = TransformerConfig(
    vocab_size=128, embed_dim=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64
  )
  mesh = sharding.make_mesh((1, 4, 2))
  model = sharding.create_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
  ref = jax.jit(lambda: nnx.state(Transformer(cfg, rngs=nnx.Rngs(0))))()  # same init, unsharded
  k = model.blocks.k[...]
  assert k.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
  assert k.addressable_shards[0].data.shape == (2, 8, 1, 8)
  np.testing.assert_array_equal(np.asarray(k), np.asarray(ref["blocks"]["k"][...]))


def test_forward_does_not_recompile_for_same_shape():
  cfg = TransformerConfig(
    vocab_size=64, embed_dim=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=32
  )
  graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))

  @jax.jit
  @chex.assert_max_traces(n=1)
  def fwd(state, tokens):
    return nnx.merge(graphdef, state)(tokens)

  a = fwd(state, jnp.zeros((2, 5), jnp.int32))
  b = fwd(state, jnp.ones((2, 5), jnp.int32))
  assert a.shape == b.shape == (2, 5, 64)
  with pytest.raises(AssertionError):
    fwd(state, jnp.ones((3, 5), jnp.int32))  # a new shape does retrace, and is caught


def test_bf16_compute_close_to_f32():
  path, _ = save_hf_model("llama", seed=8)
  m32, cfg = load_pretrained(path)
  m16, cfg16 = load_pretrained(path, dtype=jnp.bfloat16, param_dtype=jnp.float32)
  assert cfg16.dtype == jnp.bfloat16 and m16.blocks.q[...].dtype == jnp.float32
  tokens = np.random.RandomState(6).randint(0, cfg.vocab_size, (2, 7))
  a, b = np.asarray(m32(tokens)), np.asarray(m16(tokens))
  assert b.dtype == np.float32
  assert np.abs(a - b).max() < 0.05 * np.abs(a).max() + 1e-2


# ----------------------------------------------------------------------------- broken inputs


def _broken_copy(tmp_path, mutate):
  from safetensors.numpy import load_file, save_file

  src, _ = save_hf_model("llama", seed=9)
  dst = tmp_path / "broken"
  shutil.copytree(src, dst)
  tensors = load_file(str(dst / "model.safetensors"))
  config = json.loads((dst / "config.json").read_text())
  tensors, config = mutate(tensors, config)
  save_file(tensors, str(dst / "model.safetensors"))
  (dst / "config.json").write_text(json.dumps(config))
  return dst


def test_missing_tensor(tmp_path):
  name = "model.layers.1.mlp.up_proj.weight"
  d = _broken_copy(tmp_path, lambda t, c: ({k: v for k, v in t.items() if k != name}, c))
  with pytest.raises(CheckpointError, match="missing.*layers.1.mlp.up_proj"):
    load_pretrained(d)


def test_extra_tensor(tmp_path):
  d = _broken_copy(tmp_path, lambda t, c: ({**t, "model.extra.weight": np.ones(3, np.float32)}, c))
  with pytest.raises(CheckpointError, match="unexpected.*model.extra.weight"):
    load_pretrained(d)


def test_wrong_shape(tmp_path):
  name = "model.layers.0.self_attn.k_proj.weight"

  def mutate(t, c):
    t = dict(t)
    t[name] = t[name][:-1]
    return t, c

  d = _broken_copy(tmp_path, mutate)
  with pytest.raises(CheckpointError, match="k_proj.weight.*shape"):
    load_pretrained(d)


def test_unsupported_model_type(tmp_path):
  d = _broken_copy(tmp_path, lambda t, c: (t, {**c, "model_type": "gpt_neox"}))
  with pytest.raises(ValueError, match="unsupported model_type 'gpt_neox'"):
    load_pretrained(d)


def test_unsupported_rope_scaling():  # the supported types: tests/test_rope.py
  cfg = json.loads(json.dumps(make_hf_model("llama").config.to_dict()))
  cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e4, "factor": 4.0}
  with pytest.raises(CheckpointError, match="rope scaling type 'longrope'"):
    from_hf_config(cfg)


def test_corrupt_safetensors(tmp_path):
  src, _ = save_hf_model("llama", seed=9)
  dst = tmp_path / "corrupt"
  shutil.copytree(src, dst)
  blob = (dst / "model.safetensors").read_bytes()
  (dst / "model.safetensors").write_bytes(blob[: len(blob) // 2])
  with pytest.raises(CheckpointError, match="model.safetensors"):
    load_pretrained(dst)


def test_missing_path():
  with pytest.raises(CheckpointError, match="does not exist"):
    load_pretrained(Path(tempfile.gettempdir()) / "no_such_checkpoint_dir")


def test_sharded_index_round_trip(tmp_path):
  path, hf_model = save_hf_model("qwen2", seed=10)
  model, cfg = load_pretrained(path)
  out = save_pretrained(model, cfg, tmp_path / "multi", max_shard_bytes=100_000)
  assert (out / "model.safetensors.index.json").exists()
  assert len(list(out.glob("*.safetensors"))) > 1
  again, _ = load_pretrained(out)
  tokens = np.arange(10)[None] % cfg.vocab_size
  np.testing.assert_array_equal(np.asarray(again(tokens)), np.asarray(model(tokens)))


def test_chunked_attention_matches_full():
  cfg = TransformerConfig(
    vocab_size=64,
    embed_dim=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    mlp_dim=64,
    attention_chunk=0,
  )
  graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(1)))
  chunked_def, _ = nnx.split(Transformer(cfg.replace(attention_chunk=4), rngs=nnx.Rngs(1)))
  tokens = jnp.asarray(np.random.RandomState(7).randint(0, 64, (2, 11)))

  def loss(state, gdef):
    return jnp.sum(jax.nn.log_softmax(nnx.merge(gdef, state)(tokens))[..., 3])

  full, g_full = jax.value_and_grad(loss)(state, graphdef)
  chunked, g_chunked = jax.value_and_grad(loss)(state, chunked_def)
  np.testing.assert_allclose(chunked, full, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_chunked)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5)
