"""Prefill (full forward) throughput and MFU against a matmul peak probed in the same run.

  python benchmarks/forward.py [--smollm2] [--batch 8] [--length 256]

Prints one JSON object. MFU = model matmul FLOPs / (time x probed peak); the peak is the median
rate of a large jitted matmul on this machine, measured in this run (so the ratio is
meaningful even though absolute times are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import matmul_peak, median_time  # noqa: E402
from flax import nnx  # noqa: E402

from spade_jax.models import Transformer, TransformerConfig, load_pretrained  # noqa: E402

TINY = TransformerConfig(
  vocab_size=4096,
  embed_dim=256,
  num_layers=4,
  num_heads=4,
  num_kv_heads=2,
  head_dim=64,
  mlp_dim=768,
  qk_norm=True,
  model_type="qwen3",
)


def bench(model, cfg, batch, length):
  graphdef, state = nnx.split(model)
  fwd = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))
  tokens = jnp.asarray(np.random.RandomState(0).randint(0, cfg.vocab_size, (batch, length)))
  t = median_time(lambda: fwd(state, tokens))
  flops = cfg.flops_per_token(length) * batch * length
  return {
    "seconds": t,
    "tokens_per_s": batch * length / t,
    "model_flops": flops,
    "achieved_flops_per_s": flops / t,
  }


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--length", type=int, default=256)
  p.add_argument("--smollm2", action="store_true", help="also benchmark SmolLM2-135M")
  args = p.parse_args()
  out = {"device": str(jax.devices()[0]), "batch": args.batch, "length": args.length}
  peak32 = matmul_peak(dtype=jnp.float32)
  peak16 = matmul_peak(dtype=jnp.bfloat16)
  out["peak_flops_per_s"] = {"float32": peak32, "bfloat16_f32acc": peak16}
  runs = {"tiny_f32": (Transformer(TINY, rngs=nnx.Rngs(0)), TINY, peak32)}
  cfg16 = TINY.replace(dtype=jnp.bfloat16)
  runs["tiny_bf16"] = (Transformer(cfg16, rngs=nnx.Rngs(0)), cfg16, peak16)
  if args.smollm2:
    model, cfg = load_pretrained("smollm2")
    runs["smollm2_f32"] = (model, cfg, peak32)
  for name, (model, cfg, peak) in runs.items():
    r = bench(model, cfg, args.batch, args.length)
    r["mfu"] = r["achieved_flops_per_s"] / peak
    out[name] = r
  print(json.dumps(out, indent=2))


if __name__ == "__main__":
  main()
