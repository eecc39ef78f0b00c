"""RoPE scaling (linear, dynamic, yarn, llama3) against transformers: logit parity, greedy
generation through the KV cache, export round trip, HF config parsing and refusals."""

import json
import shutil
import tempfile

import jax
import numpy as np
import pytest
import torch
from flax import nnx
from hf_fixtures import make_hf_model

from spade_jax.engine.generate import Engine, SamplingParams, generate
from spade_jax.models import (
  CheckpointError,
  RopeScaling,
  TransformerConfig,
  from_hf_config,
  load_pretrained,
  save_pretrained,
  to_hf_config,
)

# name -> (fixture kind, HF config overrides). Tiny heads (H=16) put llama3's wavelengths on
# both sides of its band (high / medium / low frequencies all occur) and yarn's ramp inside the
# head; dynamic's max_position_embeddings is below the 23-token sequences so it grows.
CASES = {
  "llama3": (
    "llama",
    dict(
      max_position_embeddings=1024,
      rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 50000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 128,
      },
    ),
  ),
  "yarn": (
    "qwen3",
    dict(
      max_position_embeddings=256,
      rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 64,
      },
    ),
  ),
  "yarn_mscale": (  # attention factor from mscale / mscale_all_dim, untruncated ramp, betas
    "llama",
    dict(
      max_position_embeddings=512,
      rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 50000.0,
        "factor": 8.0,
        "original_max_position_embeddings": 64,
        "mscale": 2.0,
        "mscale_all_dim": 1.0,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "truncate": False,
      },
    ),
  ),
  "linear": (
    "qwen2",
    dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 3.0}),
  ),
  "dynamic": (
    "llama",
    dict(
      max_position_embeddings=16,
      rope_parameters={"rope_type": "dynamic", "rope_theta": 50000.0, "factor": 4.0},
    ),
  ),
}


_LOADED = {}
SHARPEN = 8.0


def _checkpoint(name):
  """(path, transformers model, our model, cfg) of case ``name``, built once per module."""
  if name not in _LOADED:
    kind, overrides = CASES[name]
    hf = make_hf_model(kind, list(CASES).index(name), **overrides)
    with torch.no_grad():  # sharper attention, so that the positions matter to the logits
      for key, p in hf.named_parameters():
        if key.endswith(("q_proj.weight", "k_proj.weight")) and kind != "qwen3":  # qk-norm
          p.mul_(SHARPEN)
    path = tempfile.mkdtemp(prefix=f"spade_rope_{name}_")
    hf.save_pretrained(path)
    _LOADED[name] = (path, hf, *load_pretrained(path))
  return _LOADED[name]


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
  yield
  for path, *_ in _LOADED.values():
    shutil.rmtree(path, ignore_errors=True)
  _LOADED.clear()


def _hf_logits(hf, tokens):
  with torch.no_grad():
    return hf(torch.tensor(np.asarray(tokens))).logits.float().numpy()


def _hf_greedy(hf, prompts, new):
  out = []
  with torch.no_grad():
    for p in prompts:
      ids = torch.tensor([p])
      gen = hf.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False
      )
      out.append(gen[0, len(p) :].tolist())
  return out


@pytest.mark.parametrize("name", list(CASES))
def test_logit_parity_float32(name):
  path, hf, model, cfg = _checkpoint(name)
  assert cfg.rope_scaling.rope_type == CASES[name][1]["rope_parameters"]["rope_type"]
  unscaled, _ = load_pretrained(path, rope_scaling=None)  # same weights, default RoPE
  rng = np.random.RandomState(1)
  lengths = (12, 23) if name == "dynamic" else (23,)  # dynamic: within, then beyond 16
  for T in lengths:
    tokens = rng.randint(0, cfg.vocab_size, (2, T))
    ref = _hf_logits(hf, tokens)
    err = np.abs(np.asarray(model(tokens)) - ref).max()
    assert err <= 1e-4, (name, T, err)
    off = np.abs(np.asarray(unscaled(tokens)) - ref).max()  # the parity is not vacuous
    assert off <= 1e-4 if T <= cfg.max_position and name == "dynamic" else off > 1e-2, off


def _full_forward_greedy(model, prompts, new, width=32):
  """Greedy tokens from full causal forwards (no cache), right-padded to ``width``: one jit."""
  graphdef, state = nnx.split(model)
  forward = jax.jit(lambda state, tokens: nnx.merge(graphdef, state)(tokens))
  out = []
  for prompt in prompts:
    seq = list(prompt)
    for _ in range(new):
      tokens = np.zeros((1, width), np.int32)
      tokens[0, : len(seq)] = seq
      seq.append(int(np.asarray(forward(state, tokens))[0, len(seq) - 1].argmax()))
    out.append(seq[len(prompt) :])
  return out


@pytest.mark.parametrize("name", ["llama3", "yarn"])
def test_greedy_generation_matches_full_forward_and_transformers(name):
  _, hf, model, cfg = _checkpoint(name)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in (5, 11)]
  out = generate(model, prompts, max_new_tokens=12, greedy=True)
  assert out.tokens == _full_forward_greedy(model, prompts, 12)
  assert out.tokens == _hf_greedy(hf, prompts, 12)


def test_dynamic_greedy_generation_matches_transformers_past_max_position():
  """Prompts of 10 tokens, 14 new: the cached decode crosses max_position_embeddings=16, where
  each step's token is rotated with the frequencies of its own length (as transformers')."""
  _, hf, model, cfg = _checkpoint("dynamic")
  rng = np.random.default_rng(1)
  prompts = [rng.integers(0, cfg.vocab_size, 10).tolist() for _ in range(2)]  # equal lengths
  engine = Engine(model, max_cache_size=64)
  state = engine.init(prompts, max_new_tokens=14)
  out = engine.outputs(engine.run(state, SamplingParams.make(2, greedy=True)))
  assert out.tokens == _hf_greedy(hf, prompts, 14)


@pytest.mark.parametrize("name", ["llama3", "yarn", "linear", "dynamic"])
def test_export_round_trip_through_transformers(name, tmp_path):
  from transformers import AutoModelForCausalLM

  _, hf, model, cfg = _checkpoint(name)
  out = save_pretrained(model, cfg, tmp_path / "export")
  reloaded = AutoModelForCausalLM.from_pretrained(str(out)).eval()
  assert reloaded.config.rope_parameters == hf.config.rope_parameters
  assert reloaded.config.max_position_embeddings == hf.config.max_position_embeddings
  tokens = np.random.RandomState(3).randint(0, cfg.vocab_size, (2, 23))
  np.testing.assert_array_equal(_hf_logits(reloaded, tokens), _hf_logits(hf, tokens))
  assert load_pretrained(out)[1] == cfg


def test_legacy_rope_scaling_dict_is_read_as_transformers_does():
  """A Llama-3.1-style config.json: ``rope_scaling`` with ``type``, top-level rope_theta."""
  hf = json.loads(json.dumps(make_hf_model("llama").config.to_dict()))
  del hf["rope_parameters"]
  hf["rope_theta"] = 500000.0
  hf["max_position_embeddings"] = 131072
  hf["rope_scaling"] = {
    "type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1,
    "high_freq_factor": 4,
    "original_max_position_embeddings": 8192,
  }
  cfg = from_hf_config(hf)
  assert cfg.rope_theta == 500000.0
  assert cfg.rope_scaling == RopeScaling("llama3", 8.0, 8192, 1.0, 4.0)
  # yarn without original_max_position_embeddings / factor: transformers' defaults
  hf["rope_scaling"] = {"rope_type": "yarn", "factor": None}
  hf["original_max_position_embeddings"] = 32768  # top level wins (as transformers)
  cfg = from_hf_config(hf)
  assert cfg.rope_scaling == RopeScaling("yarn", factor=4.0, original_max_position_embeddings=32768)
  exported = to_hf_config(cfg)["rope_parameters"]
  assert exported == {
    "rope_type": "yarn",
    "rope_theta": 500000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
  }


def test_config_with_rope_scaling_is_hashable_and_round_trips_as_dict():
  cfg = _checkpoint("yarn")[3]
  assert hash(cfg) == hash(cfg.replace())
  d = json.loads(json.dumps(cfg.to_dict()))
  assert TransformerConfig.from_dict(d) == cfg
  assert "rope_scaling" not in cfg.replace(rope_scaling=None).to_dict()  # old checkpoints match


@pytest.mark.parametrize(
  "params, match",
  [
    ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}, "'longrope'"),
    ({"rope_type": "su", "factor": 2.0}, "'su'"),
    ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}, "partial_rotary"),
    ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}, "low_freq_factor"),
    ({"rope_type": "dynamic"}, "factor"),
    ({"rope_type": "linear", "factor": "2"}, "factor"),
  ],
)
def test_unsupported_rope_parameters_are_refused(params, match):
  hf = json.loads(json.dumps(make_hf_model("llama").config.to_dict()))
  hf["rope_parameters"] = {"rope_theta": 1e4, **params}
  with pytest.raises(CheckpointError, match=match):
    from_hf_config(hf)
