"""Attention implementations side by side: the model forward (and its gradient) under each
``attention_impl``, timed in interleaved rounds in one process.

  python benchmarks/attention.py [--impls reference,xla] [--batch 16] [--length 192]
                                 [--rounds 5] [--grad] [--padded] [--dtype float32]

Model: 4 layers, width 256, 4 heads of 64 over 2 kv heads (GQA), Qwen3 qk-norm, vocab 4096,
float32. ``--padded`` passes a left-padding ``mask_BT`` (a quarter of each row padded), which
the cuDNN path cannot express as seq-lengths. Prints one JSON object: per impl the median
seconds of the jitted forward (and of ``value_and_grad`` of a logit loss with ``--grad``), and
the max |logits - reference logits|. Rounds alternate the impls, so load from other processes
hits them alike.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.models import Transformer, TransformerConfig

CFG = TransformerConfig(
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


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--impls", default="reference,xla")
  ap.add_argument("--batch", type=int, default=16)
  ap.add_argument("--length", type=int, default=192)
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--grad", action="store_true")
  ap.add_argument("--padded", action="store_true")
  ap.add_argument("--dtype", default="float32")
  args = ap.parse_args()
  B, T = args.batch, args.length
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, CFG.vocab_size, (B, T)), jnp.int32)
  mask = None
  if args.padded:
    pad = T // 4
    mask = jnp.broadcast_to(jnp.arange(T) >= pad, (B, T))

  fns = {}
  for impl in args.impls.split(","):
    cfg = CFG.replace(attention_impl=impl, dtype=jnp.dtype(args.dtype))
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))  # same seed: same params

    def forward(params, graphdef=graphdef):
      return nnx.merge(graphdef, params)(tokens, mask_BT=mask)

    def loss(params, graphdef=graphdef):
      logits = nnx.merge(graphdef, params)(tokens, mask_BT=mask)
      return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    fns[impl] = (jax.jit(forward), jax.jit(jax.value_and_grad(loss)), params)

  times = {impl: {"forward": [], "grad": []} for impl in fns}
  logits = {}
  for impl, (fwd, grad, params) in fns.items():  # compile + warm up
    logits[impl] = np.asarray(jax.block_until_ready(fwd(params)))
    jax.block_until_ready(fwd(params))
    if args.grad:
      jax.block_until_ready(grad(params))
  for _ in range(args.rounds):
    for impl, (fwd, grad, params) in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(fwd(params))
      times[impl]["forward"].append(time.perf_counter() - t0)
      if args.grad:
        t0 = time.perf_counter()
        jax.block_until_ready(grad(params))
        times[impl]["grad"].append(time.perf_counter() - t0)
  first = next(iter(logits))
  out = {
    "backend": jax.default_backend(),
    "device": str(jax.devices()[0].device_kind),
    "batch": B,
    "length": T,
    "dtype": args.dtype,
    "padded": args.padded,
    "rounds": args.rounds,
  }
  for impl, t in times.items():
    out[impl] = {k: round(float(np.median(v)), 5) for k, v in t.items() if v}
    out[impl]["max_abs_logit_diff_vs_" + first] = float(np.abs(logits[impl] - logits[first]).max())
  print(json.dumps(out))


if __name__ == "__main__":
  main()
