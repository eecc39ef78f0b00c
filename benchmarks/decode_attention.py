"""One layer's decode attention at issue 26's shapes, lowered four ways, side by side.

  python benchmarks/decode_attention.py [--batches 16,64] [--rounds 5] [--calls 50]

The decode step attends one query per sequence (2 KV heads x 2 query heads of 64) to a
256-slot key cache, 70 % of slots valid. Variants: ``dot`` (`masked_attention` on the
engine's ``[B, K, H, S]`` key cache: two batched dots, what accelerators run), ``bcast``
(scores and output as broadcast-multiply + sum: the engine's own `one_query_attention`, which
its one-token step runs on the CPU backend), and both with the key cache as ``[B, K, S, H]``
(``ksh_dot``, ``ksh_bcast``). Prints one JSON object: per batch and variant the median
microseconds of a jitted call (``--calls`` calls per round, rounds alternate the variants) and
the max |output - dot's output|. Issue 26's finding (BUILD_NOTES): all four are bit-identical
on XLA:CPU and ``bcast`` is the fastest at batch 64.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.engine.kv_cache import one_query_attention
from spade_jax.models.block import MASK_VALUE, masked_attention

F32 = jnp.float32


def _softmax_masked(scores, mask, H):
  return jax.nn.softmax(jnp.where(mask, scores * H**-0.5, MASK_VALUE), axis=-1)


def dot(q, k_khs, k_ksh, v, mask):
  return masked_attention(q, k_khs, v, mask, F32, "bkgh,bkhs->bkgs", "bkgs,bksh->bkgh")


def bcast(q, k_khs, k_ksh, v, mask):
  return one_query_attention(q, k_khs, v, mask, F32)


def ksh_dot(q, k_khs, k_ksh, v, mask):
  return masked_attention(q, k_ksh, v, mask, F32, "bkgh,bksh->bkgs", "bkgs,bksh->bkgh")


def ksh_bcast(q, k_khs, k_ksh, v, mask):
  s = jnp.sum(q[:, :, :, None, :] * k_ksh[:, :, None], axis=-1)
  p = _softmax_masked(s, mask, q.shape[-1])
  return jnp.sum(p[..., None] * v[:, :, None], axis=-2)


VARIANTS = {"dot": dot, "bcast": bcast, "ksh_dot": ksh_dot, "ksh_bcast": ksh_bcast}


def bench(batch: int, rounds: int, calls: int) -> dict:
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(batch, 2, 2, 64)), F32)
  k_khs = jnp.asarray(rng.normal(size=(batch, 2, 64, 256)), F32)
  k_ksh = jnp.swapaxes(k_khs, -1, -2)
  v = jnp.asarray(rng.normal(size=(batch, 2, 256, 64)), F32)
  mask = jnp.asarray(rng.random((batch, 1, 1, 256)) < 0.7)
  args = (q, k_khs, k_ksh, v, mask)
  fns = {name: jax.jit(f) for name, f in VARIANTS.items()}
  ref = fns["dot"](*args)
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, f in fns.items():
      jax.block_until_ready(f(*args))
      t0 = time.perf_counter()
      for _ in range(calls):
        out = f(*args)
      jax.block_until_ready(out)
      times[name].append((time.perf_counter() - t0) / calls)
  return {
    name: {
      "us": round(statistics.median(times[name]) * 1e6, 1),
      "max_abs_diff": float(jnp.max(jnp.abs(fns[name](*args) - ref))),
    }
    for name in fns
  }


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--batches", default="16,64")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--calls", type=int, default=50)
  args = ap.parse_args()
  out = {f"B{b}": bench(b, args.rounds, args.calls) for b in map(int, args.batches.split(","))}
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  main()
