"""Causal query blocks (``block._causal_blocks``) at several block sizes, side by side.

  python benchmarks/causal_attention.py [--shapes 16x192,6x512,3x1024] [--blocks 64,128]
                                        [--rounds 5] [--calls 3]

One layer's grouped attention (2 KV heads x 2 query heads of 64, issue 26's model), forward +
backward of ``sum(attention(q, k, v) * w)`` through ``block.attention``: ``full`` is the masked
path over every key (``causal=False`` with the causal mask, what ran before the blocks), a
number is ``causal=True`` with blocks of that many queries (set through ``CAUSAL_BLOCK``, with
no cap on the number of blocks; the default rule is ``block.causal_block_size``). Prints one
JSON object: per shape and variant the compile seconds, the median milliseconds of a call
(``--calls`` calls per round, rounds alternate the variants) and the max |gradient - full's|.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.models import TransformerConfig, block

CFG = TransformerConfig(
  vocab_size=4096,
  embed_dim=256,
  num_layers=1,
  num_heads=4,
  num_kv_heads=2,
  head_dim=64,
  mlp_dim=768,
  model_type="qwen3",
)


def variant(cfg, blocks: int | None):
  """The jitted forward + backward; ``blocks`` None: the unblocked masked path."""

  def loss(q, k, v, w, mask):
    out = block.attention(cfg, q, k, v, mask, causal=blocks is not None)
    return jnp.sum(out * w)

  grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))

  def call(*args):
    saved = block.CAUSAL_BLOCK, block.CAUSAL_MAX_BLOCKS, block.CAUSAL_UNROLL_LIMIT
    if blocks is not None:  # read at trace time: the first call compiles with them
      block.CAUSAL_BLOCK, block.CAUSAL_MAX_BLOCKS, block.CAUSAL_UNROLL_LIMIT = blocks, 10**9, 10**9
    try:
      return grad(*args)
    finally:
      block.CAUSAL_BLOCK, block.CAUSAL_MAX_BLOCKS, block.CAUSAL_UNROLL_LIMIT = saved

  return call


def bench(batch: int, length: int, blocks: list[int], rounds: int, calls: int) -> dict:
  cfg = CFG.replace(attention_chunk=max(length, 512))  # no rematerialisation: as in the update
  rng = np.random.default_rng(length)
  N, K, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  q, w = (jnp.asarray(rng.standard_normal((batch, length, N, H)), jnp.float32) for _ in "qw")
  k, v = (jnp.asarray(rng.standard_normal((batch, length, K, H)), jnp.float32) for _ in "kv")
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool)), (batch, length, length))
  args = (q, k, v, w, mask)
  fns = {"full": variant(cfg, None)} | {str(c): variant(cfg, c) for c in blocks if c < length}
  rows, ref = {}, None
  for name, f in fns.items():
    t0 = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    rows[name] = {"compile_s": round(time.perf_counter() - t0, 2)}
    ref = out if ref is None else ref
    rows[name]["max_abs_diff"] = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(out, ref))
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, f in fns.items():
      t0 = time.perf_counter()
      for _ in range(calls):
        out = f(*args)
      jax.block_until_ready(out)
      times[name].append((time.perf_counter() - t0) / calls)
  for name in fns:
    rows[name]["ms"] = round(statistics.median(times[name]) * 1e3, 1)
  return rows


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--shapes", default="16x192,6x512,3x1024", help="batch x length, comma list")
  ap.add_argument("--blocks", default="32,48,64,96,128,256", help="block sizes, comma list")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--calls", type=int, default=3)
  a = ap.parse_args()
  blocks = [int(c) for c in a.blocks.split(",")]
  out = {"benchmark": "causal_attention", "backend": jax.default_backend()}
  for shape in a.shapes.split(","):
    b, t = (int(x) for x in shape.split("x"))
    out[shape] = bench(b, t, blocks, a.rounds, a.calls)
    print(json.dumps({shape: out[shape]}), flush=True)
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  main()
