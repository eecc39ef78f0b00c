"""Transformer model, config, KV cache, and checkpoint loading/export."""

from spade_jax.models.cache import KVCache, init_cache
from spade_jax.models.checkpoints import (
  CheckpointError,
  load_pretrained,
  save_pretrained,
  smollm2_gguf_path,
)
from spade_jax.models.config import TransformerConfig, from_hf_config, to_hf_config
from spade_jax.models.rope import RopeScaling
from spade_jax.models.transformer import Transformer

__all__ = [
  "CheckpointError",
  "KVCache",
  "RopeScaling",
  "Transformer",
  "TransformerConfig",
  "from_hf_config",
  "init_cache",
  "load_pretrained",
  "save_pretrained",
  "smollm2_gguf_path",
  "to_hf_config",
]
