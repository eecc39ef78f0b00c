"""Issue 26's accelerator check: our sampler and our GRPO update on a GPU (or TPU), one short run.

Builds a random model of an architecture preset (default ``Qwen/Qwen3-0.6B``: 28 layers, width
1024, 16 query / 8 KV heads of 128, vocab 151936, tied; `spade_jax.models.presets`) with float32
parameters and ``--dtype`` (default bfloat16) matmuls, then times, after a warm-up that compiles:

* decode: ``vs_tunix.ours_decode`` (the engine's prefill + jitted decode loop) at each of
  ``--batches`` x ``--modes`` on random ``--prompt``-token prompts, exactly ``--new`` new tokens;
  decode tokens/s, prefill tokens/s, retraces after the warm-up (must be 0), and the decode
  loop's weight-read rate (parameter bytes in ``--dtype`` x decode steps / decode time: the
  bound a small batch runs against);
* update: ``vs_tunix.ours_update`` (one jitted GRPO step, AdamW, KL off, loss from position
  ``--prompt`` on) on ``--update-batch`` x (``--prompt`` + ``--new``) random tokens; seconds per
  step, model FLOPs (forward + backward matmuls, `TransformerConfig.flops_per_token`), achieved
  TFLOP/s and its share of a square-matmul peak (``--peak-n``, in ``--dtype``) probed in the
  same run.

Prints one JSON object (and writes it to ``--out`` or, when set, ``$OUT/gpu_check.json``) with
the device's kind, the JAX version and the peak device memory where the backend reports it.
``--small`` swaps in issue 26's CPU model (4 layers, width 256, vocab 4096) and small shapes,
so the script can be dry-run on a CPU before device time is spent::

  python benchmarks/gpu_check.py                 # on the device machine (a few minutes)
  python benchmarks/gpu_check.py --small         # dry run here (~1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import matmul_peak  # noqa: E402
from train_step import VS_TORCH  # noqa: E402
from vs_tunix import MODES, ours_decode, ours_update, update_flops  # noqa: E402

from spade_jax.models import Transformer  # noqa: E402
from spade_jax.models.config import from_hf_config  # noqa: E402
from spade_jax.models.presets import hf_config  # noqa: E402

# shapes: (the device check's, --small's); a flag given on the command line wins over both
SHAPES = dict(
  batches=("16,64", "4,16"),
  prompt=(64, 32),
  new=(512, 32),
  update_batch=(16, 4),
  peak_n=(8192, 1024),
)


def build(args):
  """The random model: ``(model, cfg)``."""
  from flax import nnx

  hf = dict(VS_TORCH, model_type="qwen3") if args.small else hf_config(args.preset)
  cfg = from_hf_config(hf, dtype=jnp.dtype(args.dtype), param_dtype=jnp.float32, remat=args.remat)
  return Transformer(cfg, rngs=nnx.Rngs(0)), cfg


def peak_memory() -> int | None:
  stats = jax.devices()[0].memory_stats() or {}
  return stats.get("peak_bytes_in_use")


def decode_rows(model, cfg, args) -> list[dict]:
  param_bytes = cfg.num_params * jnp.dtype(args.dtype).itemsize
  rows = ours_decode(model, cfg, args)
  for row in rows:
    row.pop("tokens", None)
    steps_per_s = row["decode_tok_s"] / row["batch"]
    row["weight_read_gb_s"] = round(param_bytes * steps_per_s / 1e9, 1)
  return rows


def update_row(model, cfg, args) -> dict:
  row = ours_update(model, cfg, argparse.Namespace(**{**vars(args), "batch": args.update_batch}))
  flops = update_flops(cfg, args.update_batch, args.prompt, args.new)
  row["model_tflop"] = round(flops / 1e12, 3)
  row["tflops_per_s"] = round(flops / row["step_s"] / 1e12, 2)
  return row


def main(argv: list[str] | None = None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--preset", default="Qwen/Qwen3-0.6B")
  ap.add_argument("--small", action="store_true", help="issue 26's CPU model, small shapes")
  ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
  ap.add_argument("--remat", default="none", choices=("none", "full", "dots"))
  ap.add_argument("--batches")
  ap.add_argument("--modes", default="greedy,spade", help="comma list of " + " | ".join(MODES))
  ap.add_argument("--prompt", type=int)
  ap.add_argument("--new", type=int)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--update-batch", type=int)
  ap.add_argument("--steps", type=int, default=3, help="timed update steps")
  ap.add_argument("--peak-n", type=int, help="square-matmul size of the peak probe")
  ap.add_argument("--no-decode", action="store_true")
  ap.add_argument("--no-update", action="store_true")
  ap.add_argument("--out", help="also write the JSON here")
  args = ap.parse_args(argv)
  for name, (full, small) in SHAPES.items():
    if getattr(args, name) is None:
      setattr(args, name, small if args.small else full)
  args.no_loss_start = False

  t0 = time.perf_counter()
  model, cfg = build(args)
  device = jax.devices()[0]
  out = dict(
    device=getattr(device, "device_kind", str(device)),
    backend=jax.default_backend(),
    device_count=jax.device_count(),
    jax=jax.__version__,
    preset="issue 26 CPU model" if args.small else args.preset,
    dtype=args.dtype,
    params_m=round(cfg.num_params / 1e6, 1),
    build_s=round(time.perf_counter() - t0, 1),
  )
  peak = matmul_peak(args.peak_n, jnp.dtype(args.dtype))
  out["matmul_peak_tflops"] = round(peak / 1e12, 2)
  if not args.no_decode:
    out["decode"] = decode_rows(model, cfg, args)
  if not args.no_update:
    out["update"] = update_row(model, cfg, args)
    out["update"]["peak_share"] = round(out["update"]["tflops_per_s"] * 1e12 / peak, 3)
  out["peak_memory_bytes"] = peak_memory()
  text = json.dumps(out, indent=1)
  print(text)
  dest = args.out or (
    os.path.join(os.environ["OUT"], "gpu_check.json") if "OUT" in os.environ else None
  )
  if dest:
    Path(dest).write_text(text + "\n")
  return out


if __name__ == "__main__":
  main()
