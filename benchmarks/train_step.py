"""GRPO update-step benchmark: step time, tokens/s and MFU against a matmul peak probed in the
same run, plus a short profile (forward / backward / optimizer split).

  python benchmarks/train_step.py [--configs tiny,mid] [--batch 16] [--seq 512] [--steps 3]
                                  [--dtype float32|bfloat16] [--remat none|full|dots]
                                  [--micro-batches 1] [--vocab 16384]
  python benchmarks/train_step.py --vs-torch [--batch 16] [--steps 5]

``--vs-torch`` is issue 26's side-by-side: a random Qwen3 built in transformers (4 layers, width
256, 4 heads of 64, 2 KV heads, MLP 768, vocab 4096, tied, f32), loaded here through
``load_pretrained``, one GRPO update (PPO-clip + TIS, sequence-mean token-mean, AdamW with
clipping at 1.0, KL off) on batch x 192 tokens (64 prompt + 128 trained) timed against the same
update written in PyTorch on the same weights and batch, alternating, medians; the two first
losses are printed side by side (they must agree: same computation).

Prints one JSON object. MFU = model FLOPs of forward + backward (3x the forward matmul FLOPs of
``TransformerConfig.flops_per_token``; rematerialisation not counted) / step time / peak, where
the peak is the best of square matmuls of the compute dtype timed in this process. Each timing
is the median of ``--steps`` round-robin runs after one warm-up (compile excluded and reported
separately).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from spade_jax import metrics, sharding
from spade_jax import trajectories as tj
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl import losses, train_state, update
from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer


def model_config(name: str, vocab: int, dtype, remat: str) -> TransformerConfig:
  common = dict(vocab_size=vocab, dtype=dtype, param_dtype=jnp.float32, remat=remat)
  if name == "tiny":
    return TransformerConfig(
      embed_dim=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, mlp_dim=384, **common
    )
  if name == "mid":
    return TransformerConfig(
      embed_dim=512, num_layers=8, num_heads=8, num_kv_heads=8, head_dim=64, mlp_dim=1536, **common
    )
  raise ValueError(f"unknown config {name!r}")


def make_batch(cfg: TransformerConfig, batch: int, seq: int, seed: int = 0) -> tj.Trajectories:
  """Random tokens; the second half of each sequence is the trained response."""
  rng = np.random.default_rng(seed)
  mask = np.zeros((batch, seq), np.float32)
  mask[:, seq // 2 :] = 1.0
  return tj.Trajectories(
    tokens_BT=rng.integers(0, cfg.vocab_size, (batch, seq)).astype(np.int32),
    loss_mask_BT=mask,
    rollout_logprobs_BT=(mask * -np.log(cfg.vocab_size)).astype(np.float32),
    advantages_B=rng.normal(size=batch).astype(np.float32),
    role_B=np.zeros(batch, np.int32),
    rewards_B=np.zeros(batch, np.float32),
    group_id_B=np.zeros(batch, np.int32),
    valid_B=np.ones(batch, bool),
    turns_B=np.ones(batch, np.int32),
  )


def bench_config(name: str, args, peak: float) -> dict:
  cfg = model_config(name, args.vocab, jnp.dtype(args.dtype), args.remat)
  mesh = sharding.make_mesh((-1, 1, 1)) if len(jax.devices()) > 1 else None
  if mesh is None:
    model = Transformer(cfg, rngs=nnx.Rngs(0))
  else:
    model = sharding.create_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
  loss_cfg = losses.LossConfig(logprob_chunk=args.chunk)
  opt_cfg = OptimizerConfig(learning_rate=1e-6)
  graphdef, state = train_state.create_train_state(model, make_optimizer(opt_cfg), mesh=mesh)
  step = update.make_update(
    graphdef, loss_cfg, opt_cfg, micro_batches=args.micro_batches, mesh=mesh, state=state
  )
  batch = jax.tree.map(jnp.asarray, make_batch(cfg, args.batch, args.seq))
  if mesh is not None:
    batch = jax.device_put(batch, tj.shardings(mesh, batch))

  t = time.perf_counter()
  state, m = step(state, batch)
  jax.block_until_ready(m)
  compile_s = time.perf_counter() - t
  holder = {"state": state}

  def run():
    holder["state"], metrics = step(holder["state"], batch)
    return metrics

  # Profile: the same loss forward only, with backward, the transformer body alone, and the
  # optimizer alone. All are timed round-robin so load drift hits each alike.
  params = holder["state"].params
  gb, gt = float(args.batch), jnp.sum(batch.loss_mask_BT)
  optimizer = make_optimizer(opt_cfg)

  def fwd(p):
    return update.batch_loss(graphdef, p, batch, loss_cfg, global_batch=gb, global_tokens=gt)[0]

  with sharding.use_mesh(mesh):
    fwd_j = jax.jit(fwd)
    grad_j = jax.jit(
      lambda p: update.loss_and_grads(
        graphdef, p, batch, loss_cfg, micro_batches=args.micro_batches
      )[0]
    )
    body_j = jax.jit(lambda p: jnp.sum(nnx.merge(graphdef, p).hidden(batch.tokens_BT)[0]))
    opt_j = jax.jit(lambda p, o, g: optax.apply_updates(p, optimizer.update(g, o, p)[0]))
    grads = grad_j(params)
    fns = {
      "update": run,
      "forward_body": lambda: body_j(holder["state"].params),
      "forward_loss": lambda: fwd_j(holder["state"].params),
      "forward_backward": lambda: grad_j(holder["state"].params),
      "optimizer": lambda: opt_j(holder["state"].params, holder["state"].opt_state, grads),
    }
    jax.block_until_ready([f() for f in fns.values()])
    times = {k: [] for k in fns}
    for _ in range(args.steps):
      for k, f in fns.items():
        t = time.perf_counter()
        jax.block_until_ready(f())
        times[k].append(time.perf_counter() - t)
  med = {k: statistics.median(v) for k, v in times.items()}
  step_s, body_s, fwd_s, grad_s = (
    med["update"],
    med["forward_body"],
    med["forward_loss"],
    med["forward_backward"],
  )

  tokens = args.batch * args.seq
  model_flops = 3 * cfg.flops_per_token(args.seq) * tokens
  return {
    "config": {
      k: v
      for k, v in cfg.to_dict().items()
      if k
      in (
        "vocab_size",
        "embed_dim",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "mlp_dim",
        "dtype",
        "remat",
      )
    },
    "params_m": cfg.num_params / 1e6,
    "compile_s": compile_s,
    "step_s": step_s,
    "tokens_per_s": tokens / step_s,
    "model_tflops_per_step": model_flops / 1e12,
    "achieved_tflops_per_s": model_flops / step_s / 1e12,
    "mfu": model_flops / step_s / peak,
    "profile_s": med,
    "profile_frac": {
      "forward_body": body_s / step_s,
      "logprob_head_and_loss": (fwd_s - body_s) / step_s,
      "backward": (grad_s - fwd_s) / step_s,
      "optimizer": med["optimizer"] / step_s,
      "rest": (step_s - grad_s - med["optimizer"]) / step_s,
    },
  }


VS_TORCH = dict(
  vocab_size=4096,
  hidden_size=256,
  num_hidden_layers=4,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=64,
  intermediate_size=768,
  tie_word_embeddings=True,
  max_position_embeddings=1024,
  rope_theta=1e6,
  rms_norm_eps=1e-6,
)


def torch_grpo_step(hf, opt, batch, loss_cfg: losses.LossConfig):
  """One GRPO update in PyTorch, the same computation as `update.make_update` (KL off)."""
  import torch

  tokens = torch.as_tensor(np.asarray(batch.tokens_BT), dtype=torch.long)
  mask = torch.as_tensor(np.asarray(batch.loss_mask_BT))[:, 1:]
  rollout = torch.as_tensor(np.asarray(batch.rollout_logprobs_BT))[:, 1:]
  adv = torch.as_tensor(np.asarray(batch.advantages_B))[:, None]
  opt.zero_grad(set_to_none=True)
  logits = hf(input_ids=tokens).logits[:, :-1].float() / loss_cfg.temperature
  logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None])[..., 0]
  old = logp.detach()
  ratio = torch.exp(logp - old)
  pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - loss_cfg.eps_low, 1 + loss_cfg.eps_high))
  pg = pg * torch.exp(old - rollout).clamp(0, loss_cfg.tis_cap)
  per_seq = (pg * mask).sum(1) / mask.sum(1).clamp(min=1)
  loss = per_seq.sum() / tokens.shape[0]
  loss.backward()
  torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
  opt.step()
  return float(loss)


def bench_vs_torch(args) -> dict:
  import tempfile

  import torch
  from transformers import Qwen3Config, Qwen3ForCausalLM

  from spade_jax.models import load_pretrained

  torch.manual_seed(0)
  hf = Qwen3ForCausalLM(Qwen3Config(**VS_TORCH, torch_dtype="float32")).float()
  with tempfile.TemporaryDirectory() as d:
    hf.save_pretrained(d)
    model, cfg = load_pretrained(d, dtype=jnp.float32)
  hf.train()
  decay = [p for n, p in hf.named_parameters() if p.ndim > 1]
  no_decay = [p for n, p in hf.named_parameters() if p.ndim <= 1]
  opt_cfg = OptimizerConfig(learning_rate=1e-6)
  opt = torch.optim.AdamW(
    [
      {"params": decay, "weight_decay": opt_cfg.weight_decay},
      {"params": no_decay, "weight_decay": 0},
    ],
    lr=opt_cfg.learning_rate,
    betas=(opt_cfg.b1, opt_cfg.b2),
    eps=opt_cfg.eps,
  )
  loss_cfg = losses.LossConfig(logprob_chunk=args.chunk, loss_start=args.loss_start)
  graphdef, state = train_state.create_train_state(model, make_optimizer(opt_cfg))
  step = update.make_update(graphdef, loss_cfg, opt_cfg, micro_batches=args.micro_batches)
  seq = 192
  nb = make_batch(cfg, args.batch, seq)
  nb.loss_mask_BT[:, :] = 0.0
  nb.loss_mask_BT[:, 64:] = 1.0
  nb.rollout_logprobs_BT[:, :] = nb.loss_mask_BT * -np.log(cfg.vocab_size)
  batch = jax.tree.map(jnp.asarray, nb)

  t = time.perf_counter()
  state, m = step(state, batch)
  jax.block_until_ready(m)
  compile_s = time.perf_counter() - t
  jax_loss = float(m["train/loss"]) if "train/loss" in m else float("nan")
  torch_loss = torch_grpo_step(hf, opt, nb, loss_cfg)
  holder = {"state": state}

  def ours():
    holder["state"], metrics_ = step(holder["state"], batch)
    jax.block_until_ready(metrics_)

  times = {"spade_jax": [], "torch": []}
  for _ in range(args.steps):
    t = time.perf_counter()
    ours()
    times["spade_jax"].append(time.perf_counter() - t)
    t = time.perf_counter()
    torch_grpo_step(hf, opt, nb, loss_cfg)
    times["torch"].append(time.perf_counter() - t)
  med = {k: statistics.median(v) for k, v in times.items()}
  return {
    "shape": {**VS_TORCH, "batch": args.batch, "seq": seq, "trained_tokens": seq - 64},
    "loss_start": args.loss_start,
    "compile_s": compile_s,
    "first_loss": {"spade_jax": jax_loss, "torch": torch_loss},
    "step_s_median": med,
    "step_s_all": times,
    "speedup_vs_torch": med["torch"] / med["spade_jax"],
    "torch_threads": torch.get_num_threads(),
  }


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--configs", default="tiny,mid")
  p.add_argument("--batch", type=int, default=16)
  p.add_argument("--seq", type=int, default=512)
  p.add_argument("--steps", type=int, default=3)
  p.add_argument("--vocab", type=int, default=16384)
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  p.add_argument("--remat", default="none", choices=("none", "full", "dots"))
  p.add_argument("--micro-batches", type=int, default=1)
  p.add_argument("--chunk", type=int, default=256, help="log-softmax chunk (sequence positions)")
  p.add_argument("--vs-torch", action="store_true", help="issue 26's side-by-side with PyTorch")
  p.add_argument(
    "--loss-start",
    type=int,
    default=0,
    help="--vs-torch: LossConfig.loss_start (64 = log-probs of the 128 trained positions only)",
  )
  args = p.parse_args()
  if args.vs_torch:
    out = {"benchmark": "train_step_vs_torch", "devices": len(jax.devices())}
    out.update(bench_vs_torch(args))
    print(json.dumps(out, indent=1))
    return

  peak = metrics.probe_matmul_peak(jnp.dtype(args.dtype))
  out = {
    "benchmark": "train_step",
    "backend": jax.default_backend(),
    "devices": len(jax.devices()),
    "device_kind": jax.devices()[0].device_kind,
    "machine": platform.machine(),
    "batch": args.batch,
    "seq": args.seq,
    "micro_batches": args.micro_batches,
    "matmul_peak_tflops_per_s": peak / 1e12,
    "results": {},
  }
  for name in args.configs.split(","):
    out["results"][name] = bench_config(name, args, peak)
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  main()
