"""Architecture presets: the HF ``config.json`` fields of the paper's Qwen3 models, so a model
config exists without downloading a checkpoint (``spade_jax.plan`` plans memory on them).

Values are those of the hub's ``config.json`` files (huggingface.co/Qwen/<name>/blob/main/
config.json; the 30B-A3B values also match the reference's Megatron model script
cmd/models/qwen3-30B-A3B.sh: 48 layers, hidden 2048, 32 heads, 4 query groups, kv channels 128,
moe-ffn-hidden-size 768, 128 experts, top-8). The reference trains the ``-Instruct-2507``
variants of 4B and 30B-A3B, whose ``config.json`` differs from these only in ``rope_theta``
(5e6 / 1e7) and ``max_position_embeddings`` (262144): neither changes a parameter or a buffer
shape at a given context length.
"""

from __future__ import annotations

from typing import Any

from spade_jax.models.config import TransformerConfig, from_hf_config

_QWEN3 = {
  "model_type": "qwen3",
  "hidden_act": "silu",
  "vocab_size": 151936,
  "head_dim": 128,
  "rms_norm_eps": 1e-6,
  "rope_theta": 1000000.0,
  "max_position_embeddings": 40960,
  "attention_bias": False,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
}

PRESETS: dict[str, dict[str, Any]] = {
  "Qwen/Qwen3-0.6B": {
    **_QWEN3,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "tie_word_embeddings": True,
  },
  "Qwen/Qwen3-1.7B": {
    **_QWEN3,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "tie_word_embeddings": True,
  },
  "Qwen/Qwen3-4B": {
    **_QWEN3,
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": True,
  },
  "Qwen/Qwen3-8B": {
    **_QWEN3,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
  },
  "Qwen/Qwen3-30B-A3B": {
    **_QWEN3,
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "router_aux_loss_coef": 0.001,
  },
}


def hf_config(name: str) -> dict[str, Any]:
  """The ``config.json`` dict of preset ``name`` (a hub id of `PRESETS`); KeyError otherwise."""
  if name not in PRESETS:
    raise KeyError(f"no architecture preset {name!r}; presets: {', '.join(PRESETS)}")
  return dict(PRESETS[name])


def preset_config(name: str, **overrides) -> TransformerConfig:
  """The `TransformerConfig` of preset ``name`` (through `from_hf_config`, as a checkpoint's
  ``config.json`` is read), with ``overrides`` (dtype, remat, ...)."""
  return from_hf_config(hf_config(name), **overrides)
