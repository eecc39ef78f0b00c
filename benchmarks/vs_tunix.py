"""Issue 26 against Tunix: our sampler and GRPO update vs Tunix's, alternating subprocesses.

  python benchmarks/vs_tunix.py --tunix-python /work/tunix-venv/bin/python [--rounds 2]
      [--reps 3] [--steps 3] [--batches 16,64] [--modes greedy,spade] [--model-dir DIR]
      [--ours-root DIR] [--host-malloc ours|both|none]
  python benchmarks/vs_tunix.py --save-model DIR      # only write the random HF Qwen3

The model is ``train_step.py --vs-torch``'s: a random Qwen3 built in transformers with
``torch.manual_seed(0)`` (4 layers, width 256, 4 heads of 64, 2 KV heads, MLP 768, vocab 4096,
tied, f32) and written with ``save_pretrained``; we load it through ``load_pretrained``, Tunix
through ``tunix.models.qwen3.params.create_model_from_safe_tensors``
(``benchmarks/tunix_side.py``, run with the Tunix venv's python; the venv's pins are in
BUILD_NOTES.md). Each round runs our side (``--side ours``, this file in a subprocess) and Tunix's
side one after the other, the order swapping every round, so machine load drifts over both alike.
Each side measures, after a warm-up (compile excluded):

* decode tokens/s (``batch * new / t``, ``t`` = the jitted decode loop after prefill: our
  ``Engine.run``, Tunix's ``Sampler._compiled_decode_fn``) for 64-token prompts and 128 new
  tokens, exactly (no stop token), per batch and mode (``greedy``; ``spade`` = temperature 0.6,
  top-p 0.95, top-k 20; ``top_p`` = temperature 1, top-p 0.95, no top-k), median of ``--reps``;
* the GRPO update on ``--batch`` x 192 tokens (64 prompt + 128 trained; PPO-clip 0.2/0.28, TIS
  cap 2, seq-mean-token-mean, AdamW 1e-6 betas 0.9/0.98 wd 0.1 clip 1.0, KL off): our
  ``update.make_update`` step, Tunix's RL ``Trainer`` train step with its ``grpo_loss_fn``; median
  of ``--steps``; the first losses are printed side by side (same computation: must agree). Ours
  runs with ``LossConfig.loss_start = --prompt`` (log-probs of the completion only, as Tunix's
  prompt / completion split gives it) where the checkout has it, unless ``--no-loss-start``.

Prints one JSON object: per case the median over rounds of each side's median, the ratio
``ours / tunix`` (tokens/s; for the update, Tunix's step time / ours, i.e. >1 = ours faster), the
per-round ratios, the median ratio over the decode cases, greedy token agreement, and the load
average around each run. ``--ours-root`` runs our side on another checkout of the repo (e.g. a
``git archive`` of HEAD), the ``spade_jax`` it imports is printed. Our side asks glibc for
huge pages as ``experiments/run.py`` does (``spade_jax.xla_cpu.restart_with_huge_pages``);
``--host-malloc both`` gives Tunix's process the same tunable, ``none`` neither.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

MODES = {  # as benchmarks/generate.py
  "greedy": dict(greedy=True),
  "top_p": dict(temperature=1.0, top_p=0.95, top_k=0),
  "spade": dict(temperature=0.6, top_p=0.95, top_k=20),
}


def save_model(directory: str) -> str:
  """Writes train_step.py --vs-torch's random HF Qwen3 (torch.manual_seed(0)) to ``directory``."""
  import torch
  from train_step import VS_TORCH
  from transformers import Qwen3Config, Qwen3ForCausalLM

  torch.manual_seed(0)
  hf = Qwen3ForCausalLM(Qwen3Config(**VS_TORCH, torch_dtype="float32")).float()
  hf.save_pretrained(directory)
  return directory


# ------------------------------------------------------------------------------ our side
def ours_decode(model, cfg, args) -> list[dict]:
  import jax
  import numpy as np

  from spade_jax.engine.generate import Engine, SamplingParams, compilation_count

  engine = Engine(model)
  rows = []
  for batch in (int(b) for b in args.batches.split(",")):
    prompts = np.random.default_rng(batch).integers(0, cfg.vocab_size, (batch, args.prompt))
    for mode in args.modes.split(","):
      sampling = SamplingParams.make(batch, **MODES[mode])

      def once(prompts=prompts, sampling=sampling):
        t0 = time.perf_counter()
        state = engine.init(prompts, max_new_tokens=args.new)
        jax.block_until_ready(state)
        t1 = time.perf_counter()
        state = engine.run(state, sampling)
        jax.block_until_ready(state)
        t2 = time.perf_counter()
        start = int(state.prompt_slots)
        return t1 - t0, t2 - t1, np.asarray(state.tokens_BS)[:, start : start + args.new]

      t0 = time.perf_counter()
      once()
      warmup = time.perf_counter() - t0
      traces = compilation_count()
      pre, dec, tokens = [], [], None
      for _ in range(args.reps):
        p, d, tokens = once()
        pre.append(batch * args.prompt / p)
        dec.append(batch * args.new / d)
      row = dict(
        batch=batch,
        mode=mode,
        warmup_s=round(warmup, 2),
        prefill_tok_s=round(statistics.median(pre), 1),
        decode_tok_s=round(statistics.median(dec), 1),
        decode_tok_s_all=[round(x, 1) for x in dec],
        new_tokens=int(tokens.shape[1]),
        retraces_after_warmup=compilation_count() - traces,
      )
      if mode == "greedy":
        row["tokens"] = tokens.tolist()
      rows.append(row)
      print(json.dumps({k: v for k, v in row.items() if k != "tokens"}), file=sys.stderr)
  return rows


def update_flops(cfg, batch: int, prompt: int, new: int) -> float:
  """Model FLOPs of one update on ``batch`` x (``prompt`` + ``new``): forward + backward (3x the
  forward's matmuls, causal attention halved), the head over the ``new`` trained positions only."""
  seq = prompt + new
  head = 2 * cfg.embed_dim * cfg.vocab_size
  return 3 * batch * (seq * (cfg.flops_per_token(seq) - head) + new * head)


def update_setup(model, cfg, args):
  """Our side's update on issue 26's shape: ``(step, state, batch, loss_start)`` (the jitted
  update of ``model``, a fresh train state, the ``args.batch`` x ``prompt + new`` batch)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from train_step import make_batch

  from spade_jax.rl import losses, train_state, update
  from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer

  opt_cfg = OptimizerConfig(learning_rate=1e-6)
  # Tunix's TrainExample separates prompt and completion, so its loss forms the completion's
  # logits only; ours is told the same through LossConfig.loss_start (where the checkout has it)
  fields = {f.name for f in dataclasses.fields(losses.LossConfig)}
  loss_start = 0 if args.no_loss_start or "loss_start" not in fields else args.prompt
  loss_cfg = losses.LossConfig(**({"loss_start": loss_start} if loss_start else {}))
  graphdef, state = train_state.create_train_state(model, make_optimizer(opt_cfg))
  step = update.make_update(graphdef, loss_cfg, opt_cfg)
  seq = args.prompt + args.new
  nb = make_batch(cfg, args.batch, seq)
  nb.loss_mask_BT[:, :] = 0.0
  nb.loss_mask_BT[:, args.prompt :] = 1.0
  nb.rollout_logprobs_BT[:, :] = nb.loss_mask_BT * -np.log(cfg.vocab_size)
  return step, state, jax.tree.map(jnp.asarray, nb), loss_start


def ours_update(model, cfg, args) -> dict:
  import jax

  step, state, batch, loss_start = update_setup(model, cfg, args)
  seq = args.prompt + args.new
  t0 = time.perf_counter()
  state, m = step(state, batch)
  jax.block_until_ready(m)
  compile_s = time.perf_counter() - t0
  first = {k: float(v) for k, v in m.items() if k in ("train/loss", "train/grad_norm")}
  t0 = time.perf_counter()
  state, m = step(state, batch)  # a second warm-up step, as on Tunix's side
  jax.block_until_ready(m)
  second_s = time.perf_counter() - t0
  times, faults, sys_s = [], [], []
  for _ in range(args.steps):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    times.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    faults.append(r1.ru_minflt - r0.ru_minflt)
    sys_s.append(r1.ru_stime - r0.ru_stime)
  return dict(
    batch=args.batch,
    seq=seq,
    trained_tokens=args.new,
    loss_start=loss_start,
    compile_s=round(compile_s, 2),
    second_step_s=round(second_s, 3),
    first=first,
    step_s=statistics.median(times),
    step_s_all=[round(t, 4) for t in times],
    page_faults_per_step=statistics.median(faults),  # minor faults: fresh pages touched
    sys_s_per_step=round(statistics.median(sys_s), 4),  # kernel CPU time (all threads)
  )


def run_ours(args):
  import importlib.metadata as md

  from spade_jax import xla_cpu

  # first thing, as experiments/run.py: may re-execute this process (older checkouts lack it)
  getattr(xla_cpu, "restart_with_huge_pages", lambda: None)()
  tunables = os.environ.get("GLIBC_TUNABLES", "")  # what glibc read at this process's start

  import jax
  import jax.numpy as jnp

  import spade_jax
  from spade_jax.models import load_pretrained

  out = dict(
    side="ours",
    spade_jax=str(Path(spade_jax.__file__).parent),
    versions={p: md.version(p) for p in ("jax", "jaxlib", "flax", "optax")},
    backend=jax.default_backend(),
    glibc_tunables=tunables,
    load_avg_1m_start=round(os.getloadavg()[0], 2),
  )
  if not args.no_decode:
    model, cfg = load_pretrained(args.model, dtype=jnp.float32)
    out["decode"] = ours_decode(model, cfg, args)
  if not args.no_update:
    model, cfg = load_pretrained(args.model, dtype=jnp.float32)
    out["update"] = ours_update(model, cfg, args)
  out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
  print(json.dumps(out), flush=True)


# ------------------------------------------------------------------------------ driver
def common_flags(args) -> list[str]:
  flags = [
    "--model",
    args.model,
    "--batches",
    args.batches,
    "--modes",
    args.modes,
    "--prompt",
    str(args.prompt),
    "--new",
    str(args.new),
    "--reps",
    str(args.reps),
    "--batch",
    str(args.batch),
    "--steps",
    str(args.steps),
  ]
  for f in ("no_decode", "no_update", "no_loss_start"):
    if getattr(args, f):
      flags.append("--" + f.replace("_", "-"))
  return flags


def run_side(cmd: list[str], env: dict, cwd: str) -> tuple[dict, float]:
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
  wall = time.perf_counter() - t0
  if proc.returncode != 0:
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
    raise SystemExit(f"{cmd[:2]} failed with rc {proc.returncode}")
  last = [line for line in proc.stdout.splitlines() if line.startswith("{")][-1]
  return json.loads(last), wall


def drive(args):
  tmp = None
  if args.model_dir:
    args.model = args.model_dir
    if not (Path(args.model) / "config.json").exists():
      save_model(args.model)
  else:
    tmp = tempfile.TemporaryDirectory()
    args.model = save_model(tmp.name)
  flags = common_flags(args)
  ours_env = dict(os.environ)
  ours_cmd = [sys.executable, str(HERE / "vs_tunix.py"), "--side", "ours", *flags]
  if args.ours_root:
    ours_env["PYTHONPATH"] = os.pathsep.join(
      [str(Path(args.ours_root).resolve()), str(HERE)] + ours_env.get("PYTHONPATH", "").split(":")
    ).rstrip(os.pathsep)
  tunix_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
  if args.host_malloc == "none":
    ours_env["SPADE_HOST_MALLOC"] = "default"
  elif args.host_malloc == "both":  # Tunix's process gets glibc's huge pages too
    from spade_jax import xla_cpu

    xla_cpu.use_huge_pages(tunix_env)
  tunix_cmd = [args.tunix_python, str(HERE / "tunix_side.py"), "--tokens", *flags]
  runs = {"ours": [], "tunix": []}
  walls = {"ours": [], "tunix": []}
  for r in range(args.rounds):
    order = ("ours", "tunix") if r % 2 == 0 else ("tunix", "ours")
    for side in order:
      cmd, env = (ours_cmd, ours_env) if side == "ours" else (tunix_cmd, tunix_env)
      res, wall = run_side(cmd, env, str(HERE.parent))
      runs[side].append(res)
      walls[side].append(round(wall, 1))
      print(f"round {r} {side}: {wall:.0f} s, load {os.getloadavg()[0]:.1f}", file=sys.stderr)

  out = dict(
    benchmark="vs_tunix",
    rounds=args.rounds,
    reps=args.reps,
    steps=args.steps,
    cpu_count=os.cpu_count(),
    spade_jax=runs["ours"][0].get("spade_jax"),
    versions={"ours": runs["ours"][0]["versions"], "tunix": runs["tunix"][0]["versions"]},
    tunix_cache_size=runs["tunix"][0].get("cache_size"),
    host_malloc=args.host_malloc,
    glibc_tunables={s: [x.get("glibc_tunables") for x in runs[s]] for s in runs},
    wall_s=walls,
    load_avg_1m={
      s: [(x["load_avg_1m_start"], x["load_avg_1m_end"]) for x in runs[s]] for s in runs
    },
  )
  if not args.no_decode:
    cases, ratios = [], []
    n = len(runs["ours"][0]["decode"])
    for i in range(n):
      o = [x["decode"][i] for x in runs["ours"]]
      t = [x["decode"][i] for x in runs["tunix"]]
      om = statistics.median(x["decode_tok_s"] for x in o)
      tm = statistics.median(x["decode_tok_s"] for x in t)
      case = dict(
        batch=o[0]["batch"],
        mode=o[0]["mode"],
        ours_tok_s=round(om, 1),
        tunix_tok_s=round(tm, 1),
        ratio=round(om / tm, 3),
        ratio_per_round=[round(a["decode_tok_s"] / b["decode_tok_s"], 3) for a, b in zip(o, t)],
        ours_tok_s_per_round=[x["decode_tok_s"] for x in o],
        tunix_tok_s_per_round=[x["decode_tok_s"] for x in t],
        ours_retraces_after_warmup=[x["retraces_after_warmup"] for x in o],
      )
      if "tokens" in o[0] and "tokens" in t[0]:
        import numpy as np

        case["greedy_token_agreement"] = round(
          float(np.mean(np.asarray(o[0]["tokens"]) == np.asarray(t[0]["tokens"]))), 4
        )
        case["tunix_call_matches_internal"] = t[0].get("call_matches_internal")
      cases.append(case)
      ratios.append(om / tm)
    out["decode"] = cases
    out["decode_ratio_median"] = round(statistics.median(ratios), 3)
    out["decode_ratio_median_per_round"] = [
      round(statistics.median(c["ratio_per_round"][r] for c in cases), 3)
      for r in range(args.rounds)
    ]
  if not args.no_update:
    o = [x["update"] for x in runs["ours"]]
    t = [x["update"] for x in runs["tunix"]]
    om = statistics.median(x["step_s"] for x in o)
    tm = statistics.median(x["step_s"] for x in t)
    out["update"] = dict(
      shape=f"{args.batch} x {args.prompt + args.new} ({args.new} trained)",
      ours_step_s=round(om, 4),
      tunix_step_s=round(tm, 4),
      speedup_vs_tunix=round(tm / om, 3),
      speedup_per_round=[round(b["step_s"] / a["step_s"], 3) for a, b in zip(o, t)],
      ours_step_s_all=[x["step_s_all"] for x in o],
      tunix_step_s_all=[x["step_s_all"] for x in t],
      tunix_trainer_loop_s=[x.get("trainer_loop_s", x.get("trainer_loop_error")) for x in t],
      compile_s={"ours": [x["compile_s"] for x in o], "tunix": [x["compile_s"] for x in t]},
      second_step_s={
        "ours": [x["second_step_s"] for x in o],
        "tunix": [x["second_step_s"] for x in t],
      },
      tunix_compiles_in_second_step=[x.get("compiles_in_second_step") for x in t],
      first={"ours": o[0]["first"], "tunix": t[0]["first"]},
      ours_loss_start=o[0].get("loss_start", 0),
    )
  print(json.dumps(out, indent=1))
  if tmp is not None:
    tmp.cleanup()


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--tunix-python", default="/work/tunix-venv/bin/python")
  ap.add_argument("--save-model", metavar="DIR", help="only write the random HF Qwen3 to DIR")
  ap.add_argument("--model-dir", help="reuse / write the model here (default: a temp dir)")
  ap.add_argument("--ours-root", help="import spade_jax from this checkout (default: installed)")
  ap.add_argument("--rounds", type=int, default=2)
  ap.add_argument("--batches", default="16,64")
  ap.add_argument("--modes", default="greedy,spade", help="comma list of " + " | ".join(MODES))
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=128)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--batch", type=int, default=16, help="update batch")
  ap.add_argument("--steps", type=int, default=3, help="timed update steps")
  ap.add_argument("--no-decode", action="store_true")
  ap.add_argument("--no-update", action="store_true")
  ap.add_argument(
    "--no-loss-start",
    action="store_true",
    help="our update forms log-probs at every position (no LossConfig.loss_start)",
  )
  ap.add_argument(
    "--host-malloc",
    choices=("ours", "both", "none"),
    default="ours",
    help="glibc huge pages (spade_jax.xla_cpu.use_huge_pages): ours (each side as it ships: "
    "ours asks for them, Tunix does not), both (Tunix's process too), none",
  )
  ap.add_argument("--side", choices=("ours",), help=argparse.SUPPRESS)
  ap.add_argument("--model", help=argparse.SUPPRESS)
  args = ap.parse_args()
  sys.path.insert(0, str(HERE))
  if args.save_model:
    print(save_model(args.save_model))
  elif args.side == "ours":
    run_ours(args)
  else:
    drive(args)


if __name__ == "__main__":
  main()
