"""Generation throughput: spade_jax's engine vs transformers' PyTorch ``generate``, side by side.

For each model (the tiny Qwen3 config of issue 3 built in JAX, untied; ``qwen3_hf``: issue 26's
random Qwen3 built in transformers, tied, as ``vs_tunix.py`` and ``train_step.py --vs-torch`` use;
SmolLM2-135M from its GGUF) and batch size,
both engines get the same weights (ours exported with ``save_pretrained`` and loaded by
transformers) and the same random prompts (all ``--prompt`` tokens long), and decode exactly
``--new`` tokens (no stop token) in each of ``--modes``: ``greedy``; ``top_p`` (temperature 1,
top-p 0.95, top-k off: transformers is passed ``top_k=0``, its default would add top-k 50);
``spade`` (temperature 0.6, top-p 0.95, top-k 20, what SPADE samples with). Measured, repetition by repetition in alternation
so machine load hits both alike:

* prefill tokens/s: ``batch * prompt / t`` where ``t`` is our ``Engine.init`` (prefill into a
  fresh cache) and, for torch, one forward over the prompts with ``use_cache=True``;
* decode tokens/s: ``batch * new / t`` where ``t`` is our ``Engine.run`` (the jitted decode
  loop) and, for torch, ``generate`` minus its prefill (the forward timed just before it).

Compilation is excluded (one warm-up run first; its time is reported). Prints one JSON object
with medians and ``jax / torch`` ratios. The process asks glibc for huge pages as
``experiments/run.py`` does (``spade_jax.xla_cpu.restart_with_huge_pages``; torch shares the
process, so it gets them too; ``SPADE_HOST_MALLOC=default`` leaves glibc alone). Example::

  python benchmarks/generate.py --models tiny,smollm2 --batches 16,64 --reps 3
  python benchmarks/generate.py --models tiny --batches 16,64 --modes greedy,top_p,spade
  python benchmarks/generate.py --models qwen3_hf --batches 16,64 --cache 1024 --no-torch
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

# the checkout this script is in, not whichever one the venv installed (a before/after run from
# a second worktree would otherwise time the installed code)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from spade_jax import xla_cpu  # noqa: E402

# first thing: may re-execute this process (a checkout from before it has none)
getattr(xla_cpu, "restart_with_huge_pages", lambda: None)()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

TINY = dict(
  vocab_size=4096,
  embed_dim=256,
  num_layers=4,
  num_heads=4,
  num_kv_heads=2,
  head_dim=64,
  mlp_dim=768,
  qk_norm=True,
  model_type="qwen3",
  tie_embeddings=False,
  rope_theta=1e6,
  rms_eps=1e-6,
)


def build(name: str, dtype):
  from flax import nnx

  from spade_jax.models import Transformer, TransformerConfig, load_pretrained

  if name == "tiny":
    cfg = TransformerConfig(**TINY, dtype=dtype, param_dtype=dtype)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    return model, cfg
  if name == "smollm2":
    return load_pretrained("smollm2", dtype=dtype)
  if name == "qwen3_hf":  # issue 26's model: built in transformers (tied), as vs_tunix.py's
    from vs_tunix import save_model

    with tempfile.TemporaryDirectory() as d:
      return load_pretrained(save_model(d), dtype=dtype)
  raise ValueError(f"unknown model {name!r} (tiny | smollm2 | qwen3_hf)")


def torch_model(model, cfg, torch_dtype):
  import torch
  from transformers import AutoModelForCausalLM

  from spade_jax.models import save_pretrained

  with tempfile.TemporaryDirectory() as d:
    save_pretrained(model, cfg.replace(param_dtype=jnp.float32), d)
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
  return hf.to(torch_dtype).eval()


def bench_jax(engine, prompts, new, sampling, cache=None):
  t0 = time.perf_counter()
  state = engine.init(prompts, max_new_tokens=new, cache_size=cache)
  jax.block_until_ready(state)
  t1 = time.perf_counter()
  state = engine.run(state, sampling)
  jax.block_until_ready(state)
  t2 = time.perf_counter()
  tokens = np.asarray(state.tokens_BS)[:, int(state.prompt_slots) : int(state.cache.index)]
  return t1 - t0, t2 - t1, tokens


MODES = {
  "greedy": dict(greedy=True),
  "top_p": dict(temperature=1.0, top_p=0.95, top_k=0),
  "spade": dict(temperature=0.6, top_p=0.95, top_k=20),
}


def torch_kwargs(mode: str) -> dict:
  kw = MODES[mode]
  if kw.get("greedy"):
    return dict(do_sample=False)
  return dict(do_sample=True, temperature=kw["temperature"], top_p=kw["top_p"], top_k=kw["top_k"])


def bench_torch(hf, prompts, new, mode="greedy"):
  import torch

  ids = torch.tensor(np.asarray(prompts), dtype=torch.long)
  mask = torch.ones_like(ids)
  with torch.no_grad():
    t0 = time.perf_counter()
    hf(input_ids=ids, attention_mask=mask, use_cache=True)
    t1 = time.perf_counter()
    out = hf.generate(
      ids,
      attention_mask=mask,
      max_new_tokens=new,
      min_new_tokens=new,
      **torch_kwargs(mode),
      eos_token_id=None,
      pad_token_id=0,
    )
    t2 = time.perf_counter()
  return t1 - t0, (t2 - t1) - (t1 - t0), out[:, ids.shape[1] :].numpy()


def bench_case(args, name, cfg, engine, hf, batch, mode):
  """One (model, batch, mode) row: medians of ``--reps`` interleaved jax / torch runs."""
  from spade_jax.engine.generate import SamplingParams, compilation_count

  rng = np.random.default_rng(batch)
  prompts = rng.integers(0, cfg.vocab_size, (batch, args.prompt))
  sampling = SamplingParams.make(batch, **MODES[mode])
  t0 = time.perf_counter()
  bench_jax(engine, prompts, args.new, sampling, args.cache)
  compile_s = time.perf_counter() - t0
  traces = compilation_count()
  jp, jd, tp, td = [], [], [], []
  agree = None
  load_start = os.getloadavg()[0]
  for _ in range(args.reps):
    pre, dec, ours = bench_jax(engine, prompts, args.new, sampling, args.cache)
    jp.append(batch * args.prompt / pre)
    jd.append(batch * args.new / dec)
    if hf is not None:
      pre, dec, theirs = bench_torch(hf, prompts, args.new, mode)
      tp.append(batch * args.prompt / pre)
      td.append(batch * args.new / dec)
      agree = float(np.mean(ours == theirs))
  row = dict(
    model=name,
    batch=batch,
    mode=mode,
    prompt=args.prompt,
    new=args.new,
    cache_slots=args.cache,
    jax_dtype=args.dtype,
    jax_compile_s=round(compile_s, 2),
    jax_retraces_after_warmup=compilation_count() - traces,
    jax_prefill_tok_s=round(statistics.median(jp), 1),
    jax_decode_tok_s=round(statistics.median(jd), 1),
    load_avg_1m=[round(load_start, 2), round(os.getloadavg()[0], 2)],
  )
  if hf is not None:
    row.update(
      torch_dtype=args.torch_dtype,
      torch_prefill_tok_s=round(statistics.median(tp), 1),
      torch_decode_tok_s=round(statistics.median(td), 1),
      prefill_ratio=round(statistics.median(jp) / statistics.median(tp), 2),
      decode_ratio=round(statistics.median(jd) / statistics.median(td), 2),
    )
    if mode == "greedy":
      row["greedy_token_agreement"] = round(agree, 4)
  return row


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", default="tiny,smollm2")
  ap.add_argument("--batches", default="16,64")
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=128)
  ap.add_argument(
    "--cache",
    type=int,
    default=None,
    help="our KV cache slots (default: the engine's bucket of prompt + new; a larger one is "
    "what a multi-turn rollout's early turns decode in)",
  )
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--modes", default="greedy", help="comma list of " + " | ".join(MODES))
  ap.add_argument("--dtype", default="float32", help="JAX params/compute dtype")
  ap.add_argument("--torch-dtype", default="float32")
  ap.add_argument("--torch-threads", type=int, default=os.cpu_count(), help="default: cores")
  ap.add_argument("--no-torch", action="store_true")
  args = ap.parse_args()

  import torch

  from spade_jax.engine.generate import Engine

  torch.set_num_threads(args.torch_threads)
  dtype = jnp.dtype(args.dtype)
  tdtype = getattr(torch, args.torch_dtype)
  results = []
  for name in args.models.split(","):
    model, cfg = build(name, dtype)
    hf = None if args.no_torch else torch_model(model, cfg, tdtype)
    engine = Engine(model)
    for batch in (int(b) for b in args.batches.split(",")):
      for mode in args.modes.split(","):
        results.append(bench_case(args, name, cfg, engine, hf, batch, mode))
        print(json.dumps(results[-1]), flush=True)
  out = dict(
    benchmark="generate",
    cpu_count=os.cpu_count(),
    jax_backend=jax.default_backend(),
    torch_threads=torch.get_num_threads(),
    load_avg_1m_end=round(os.getloadavg()[0], 2),
    reps=args.reps,
    results=results,
  )
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  main()
