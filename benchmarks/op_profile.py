"""Where issue 26's two kernels spend their time, per XLA op: a `jax.profiler` trace of our GRPO
update or our decode loop on ``vs_tunix.py``'s model and shapes (random HF-built tied Qwen3 in
float32; the update on 16 x (64 prompt + 128 trained), AdamW, KL off, ``loss_start`` 64; decode
of 128 new tokens after 64-token prompts).

  python benchmarks/op_profile.py update [--model-dir DIR] [--steps 3] [--top 20]
  python benchmarks/op_profile.py decode [--batch 64] [--mode greedy|spade] [--top 20]

Prints one JSON object: the median time of ``--steps`` timed calls after warm-ups (a decode
call is the jitted loop after prefill: per token = that / 128), the update's model FLOPs
(forward + backward matmuls, `TransformerConfig.flops_per_token`) and GFLOP/s, a square-matmul
peak probed in the same process, and the trace's op time
summed per step (decode: per token) by what the op computes: the einsum or function it came
from (the ``op_name`` of the optimized HLO, read from an XLA dump this script asks for), else
the op's kind (the HLO instruction's name without its numeric suffix: ``ynn_fusion`` is a dot
run by XLA:CPU's YNNPACK, with whatever was fused into it; ``wrapped_broadcast`` a zero fill;
``copy_*`` / ``transpose_*`` layout passes), each with its share of the summed time. On two
cores ops run concurrently, so the summed time can exceed the wall time; the shares are the
reading.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

# host-side trace events (Python, the executor's own spans), not XLA ops
_NOT_OPS = ("ThunkExecutor", "$", "SlinkyThreadPool", "PjitFunction", "while", "Common")


def op_kind(name: str) -> str:
  """``"ynn_fusion.38"`` -> ``"ynn_fusion"``: an HLO instruction's kind."""
  return re.sub(r"(\.\d+)+$", "", name)


def op_names(dump_dir: str) -> dict[tuple[str, str], str]:
  """``(module, instruction) -> what it computes`` (the last step of its ``op_name``, e.g. an
  einsum spec) from the optimized HLO modules XLA dumped into ``dump_dir``."""
  out = {}
  for path in glob.glob(f"{dump_dir}/*.cpu_after_optimizations.txt"):
    module = Path(path).name.split(".")[1]
    text = Path(path).read_text()
    for m in re.finditer(r"%(\S+) = \S+ \S+?\(.*?op_name=\"([^\"]+)\"", text):
      parts = m.group(2).split("/")
      out[(module, m.group(1))] = parts[-2] if len(parts) > 1 else parts[0]
  return out


def op_times(trace_file: str, calls: int, names=None, module: str | None = None):
  """Milliseconds per call summed by what each op computes (``names``, else its kind) over the
  trace's complete events (only ``module``'s when given)."""
  names = names or {}
  with gzip.open(trace_file) as f:
    events = json.load(f)
  events = events["traceEvents"] if isinstance(events, dict) else events
  total = collections.Counter()
  for e in events:
    if e.get("ph") != "X" or "dur" not in e or e["name"].startswith(_NOT_OPS):
      continue
    mod = e.get("args", {}).get("hlo_module")
    if module and mod != module:
      continue
    total[names.get((mod, e["name"]), op_kind(e["name"]))] += e["dur"]
  return {k: v / 1e3 / calls for k, v in total.most_common()}


def traced(fn, calls: int, trace_dir: str) -> str:
  import jax

  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    for _ in range(calls):
      fn()
  found = glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True)
  if not found:
    raise SystemExit(f"no trace written under {trace_dir}")
  return sorted(found)[-1]


def profile_update(args, model, cfg, tmp: str) -> dict:
  import jax
  from vs_tunix import update_flops, update_setup

  args.prompt, args.new, args.no_loss_start = 64, 128, False
  step, state, batch, loss_start = update_setup(model, cfg, args)
  # counted from the config: XLA's cost analysis counts the layer scan's body once
  flops = update_flops(cfg, args.batch, args.prompt, args.new)
  box = [state]

  def call():
    box[0], m = step(box[0], batch)
    jax.block_until_ready(m)

  for _ in range(2):
    call()
  times = []
  for _ in range(args.steps):
    t0 = time.perf_counter()
    call()
    times.append(time.perf_counter() - t0)
  trace = traced(call, args.steps, f"{tmp}/trace")
  step_s = statistics.median(times)
  return dict(
    what="update",
    shape=f"{args.batch} x 192 (128 trained)",
    loss_start=loss_start,
    s_median=round(step_s, 4),
    s_all=[round(t, 4) for t in times],
    model_flops=flops,
    gflop_s=round(flops / step_s / 1e9, 1),
    per_call=op_times(trace, args.steps, op_names(f"{tmp}/dump")),
    unit="ms per update step",
  )


def profile_decode(args, model, cfg, tmp: str) -> dict:
  import jax
  import numpy as np
  from vs_tunix import MODES

  from spade_jax.engine.generate import Engine, SamplingParams

  engine = Engine(model)
  new = 128
  prompts = np.random.default_rng(args.batch).integers(0, cfg.vocab_size, (args.batch, 64))
  sampling = SamplingParams.make(args.batch, **MODES[args.mode])
  times = []

  def call():
    state = engine.init(prompts, max_new_tokens=new)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    jax.block_until_ready(engine.run(state, sampling))
    times.append(time.perf_counter() - t0)

  call()
  times.clear()
  for _ in range(args.steps):
    call()
  loop_s = statistics.median(times)
  trace = traced(call, 1, f"{tmp}/trace")
  names = op_names(f"{tmp}/dump")
  run_module = next((m for m, _ in names if "run" in m), None)
  return dict(
    what="decode",
    batch=args.batch,
    mode=args.mode,
    s_median=round(loop_s, 4),
    s_all=[round(t, 4) for t in times],
    decode_tok_s=round(args.batch * new / loop_s, 1),
    per_call=op_times(trace, new, names, run_module),
    unit="ms per decoded token (one decode step of the batch)",
  )


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("what", choices=("update", "decode"))
  ap.add_argument("--model-dir", help="the vs_tunix.py model (written here when missing)")
  ap.add_argument("--batch", type=int, default=None, help="default: 16 (update), 64 (decode)")
  ap.add_argument("--mode", default="greedy", help="decode sampling: greedy | spade | top_p")
  ap.add_argument("--steps", type=int, default=3, help="timed calls")
  ap.add_argument("--top", type=int, default=20, help="rows listed")
  args = ap.parse_args()
  args.batch = args.batch or (16 if args.what == "update" else 64)

  tmp = tempfile.TemporaryDirectory()
  os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={tmp.name}/dump"
  import jax
  import jax.numpy as jnp
  from common import matmul_peak
  from vs_tunix import save_model

  from spade_jax.models import load_pretrained

  model_dir = args.model_dir or f"{tmp.name}/model"
  if not (Path(model_dir) / "config.json").exists():
    save_model(model_dir)
  model, cfg = load_pretrained(model_dir, dtype=jnp.float32)
  profile = profile_update if args.what == "update" else profile_decode
  out = profile(args, model, cfg, tmp.name)
  per_call = out.pop("per_call")
  summed = sum(per_call.values())
  out.update(
    backend=jax.default_backend(),
    matmul_peak_gflop_s=round(matmul_peak() / 1e9, 1),
    summed_op_ms=round(summed, 3),
    ops=[
      dict(op=k, ms=round(v, 3), share=round(v / summed, 3))
      for k, v in list(per_call.items())[: args.top]
    ],
  )
  print(json.dumps(out, indent=1))
  tmp.cleanup()


if __name__ == "__main__":
  main()
