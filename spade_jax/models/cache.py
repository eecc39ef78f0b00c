"""The KV cache pytree read and written by the transformer's forward.

All sequences of a batch write at the same slot (``index``), which keeps the cache update a
single ``dynamic_update_slice``; which slots hold real tokens is tracked per sequence in
``valid_BS`` (left padding, finished sequences and idle steps write invalid slots that no query
ever attends to). Positions are passed explicitly by the caller, so a left-padded prompt gets
RoPE positions 0..len-1 while sharing slots with longer prompts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from spade_jax import sharding
from spade_jax.models.config import TransformerConfig

CACHE_AXES = ("layers", "batch", "cache_length", "act_kv_heads", None)


@struct.dataclass
class KVCache:
  k_LBSKH: jax.Array
  v_LBSKH: jax.Array
  valid_BS: jax.Array  # bool: slot holds a real token of this sequence
  index: jax.Array  # int32 scalar: next slot to write

  @property
  def size(self) -> int:
    return self.k_LBSKH.shape[2]

  @property
  def batch(self) -> int:
    return self.k_LBSKH.shape[1]


def init_cache(cfg: TransformerConfig, batch: int, size: int, dtype=None) -> KVCache:
  """An empty cache of ``size`` slots per sequence (dtype defaults to the compute dtype)."""
  dtype = dtype or cfg.dtype
  shape = (cfg.num_layers, batch, size, cfg.num_kv_heads, cfg.head_dim)
  k = sharding.constrain(jnp.zeros(shape, dtype), CACHE_AXES)
  v = sharding.constrain(jnp.zeros(shape, dtype), CACHE_AXES)
  return KVCache(
    k_LBSKH=k,
    v_LBSKH=v,
    valid_BS=jnp.zeros((batch, size), bool),
    index=jnp.zeros((), jnp.int32),
  )


def cache_shardings(cache: KVCache, mesh) -> KVCache:
  """NamedShardings for a cache (batch over data/fsdp, kv heads over tensor)."""
  kv = sharding.named_sharding(mesh, CACHE_AXES, cache.k_LBSKH.shape)
  valid = sharding.named_sharding(mesh, ("batch", None), cache.valid_BS.shape)
  rep = sharding.named_sharding(mesh, (), ())
  return KVCache(k_LBSKH=kv, v_LBSKH=kv, valid_BS=valid, index=rep)
