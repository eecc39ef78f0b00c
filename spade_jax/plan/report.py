"""The plan's report: the analytic estimate beside the compiled memory, and its text."""

from __future__ import annotations

import dataclasses
import time

from spade_jax.plan import programs as progs
from spade_jax.plan.args import GIB, Shapes, model_config


# -------------------------------------------------------------------------- analytic estimate
def analytic(config, programs: progs.Programs, shapes: Shapes) -> dict[str, dict[str, int]]:
  """Per-device bytes estimated by hand: the train state from its shardings (exact), the
  update's activations and the sampler's KV cache from the shapes."""
  cfg, mesh, state = programs.model_cfg, programs.mesh, programs.state
  params = progs.per_device_bytes(state.params)
  opt = progs.per_device_bytes(state.opt_state)
  ref = progs.per_device_bytes(state.ref_params) if state.ref_params is not None else 0
  axis = dict(mesh.shape)
  batch_shards = axis.get("data", 1) * axis.get("fsdp", 1)
  tp = axis.get("tensor", 1)
  M = shapes.micro_batches
  grads = params * (2 if M > 1 else 1)  # the f32 accumulator and one micro-batch's gradient
  b = max(1, shapes.batch // M // batch_shards)  # rows per device per micro-batch
  T, D, L = shapes.seq, cfg.embed_dim, cfg.num_layers
  H, N, K = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
  nt, kt = max(1, N // tp), max(1, K // tp) if K % tp == 0 else K
  if cfg.num_experts:
    mlp = 3 * cfg.num_experts_per_tok * (cfg.moe_mlp_dim + D) + cfg.num_experts
  else:
    mlp = 3 * cfg.mlp_dim // tp
  # one layer's forward working set (f32): norms / residual, q k v o, MLP, a query chunk's scores
  chunk = min(cfg.attention_chunk or T, T)
  layer = b * T * 4 * (4 * D + 2 * (nt + 2 * kt) * H + mlp) + b * nt * chunk * T * 4 * 2
  residual = b * T * D * 4  # the scan carry kept per layer for the backward pass
  acts = L * residual + 2 * layer if cfg.remat != "none" else L * (residual + layer)
  vocab = cfg.vocab_size // tp if cfg.vocab_size % tp == 0 else cfg.vocab_size
  acts += b * min(config.train.logprob_chunk, T) * vocab * 4 * 3  # a log-softmax chunk
  # one layer's weights gathered in the compute dtype (forward and backward)
  layer_params = (cfg.num_params - cfg.vocab_size * D * (1 if cfg.tie_embeddings else 2)) / L
  gathered = int(2 * layer_params * (2 if cfg.dtype.itemsize == 2 else 4) / tp)
  update = {
    "params": params,
    "grads": grads,
    "adam": opt,
    "reference": ref,
    "activations": int(acts),
    "gathered_layer": gathered,
  }
  update["total"] = sum(update.values())
  sb = max(1, shapes.sample_batch // batch_shards)
  S = shapes.context
  kv = 2 * L * sb * S * kt * H * 2  # keys and values, bfloat16
  slots = sb * S * (4 + 1 + 4)  # tokens, loss mask, log-probs per slot
  logits = sb * cfg.vocab_size * 4 * 3
  experts = sum(cfg.sparse_layers) * cfg.num_experts * 3 * D * cfg.moe_mlp_dim
  sampler = {
    "params": params,
    # the decode loop and the prefill gather every layer's float32 weights (XLA hoists the
    # FSDP all-gather out of the loop over layers / steps: measured, BUILD_NOTES); experts
    # stay split over their axis
    "gathered_weights": (cfg.num_params - experts) * 4 // tp,
    "kv_cache": kv,
    "slots": slots,
    "logits": logits,
    "resident_rest": opt + ref,
  }
  sampler["total"] = sum(sampler.values())
  return {"update": update, "sampler": sampler}


def update_flops_analytic(config, cfg, shapes: Shapes, n_devices: int, with_ref: bool) -> float:
  """Matmul FLOPs of one update per device: forward, backward (2x) and the rematerialised
  forward, plus the reference forward when the KL term is on."""
  passes = 3 + (1 if cfg.remat != "none" else 0) + (1 if with_ref else 0)
  tokens = shapes.batch * shapes.seq
  return passes * tokens * cfg.flops_per_token(shapes.seq) / n_devices


# ---------------------------------------------------------------------------------- the plan
def plan(config, mesh_sizes: dict[str, int], shapes: Shapes, hbm_gib: float | None = None):
  """Compiles the programs and returns the report dict (see `format_report`)."""
  import jax

  model_cfg = model_config(config)
  mesh = progs.make_mesh(mesh_sizes)
  t0 = time.perf_counter()
  programs = progs.lower(config, model_cfg, mesh, shapes)
  lower_s = time.perf_counter() - t0
  compiled = progs.compile_programs(programs)
  est = analytic(config, programs, shapes)
  n = len(jax.devices())
  memory = {name: progs.memory_stats(c) for name, (c, _) in compiled.items()}
  resident_rest = est["sampler"]["resident_rest"]
  sampler_peak = max(memory["prefill"]["peak"], memory["decode"]["peak"]) + resident_rest
  need = max(memory["update"]["peak"], sampler_peak)
  report = {
    "model": {
      "path": config.model.path,
      "params": model_cfg.num_params,
      "layers": model_cfg.num_layers,
      "experts": model_cfg.num_experts,
      "dtype": str(model_cfg.dtype.name if hasattr(model_cfg.dtype, "name") else model_cfg.dtype),
      "remat": model_cfg.remat,
    },
    "mesh": dict(mesh.shape),
    "devices": n,
    "shapes": dataclasses.asdict(shapes),
    "kl_reference": programs.with_reference,
    "memory": memory,
    "analytic": est,
    "sampler_peak": sampler_peak,
    "peak": need,
    "flops": {
      "update_xla": progs.cost_flops(compiled["update"][0]),
      "update_analytic": update_flops_analytic(
        config, model_cfg, shapes, n, programs.with_reference
      ),
    },
    "seconds": {"lower": round(lower_s, 1)}
    | {name: round(s, 1) for name, (_, s) in compiled.items()},
  }
  # the exact floor: the train state (the update's arguments) and the float32 gradient
  report["state_floor"] = memory["update"]["argument"] + est["update"]["params"]
  if model_cfg.num_experts and jax.default_backend() == "cpu":
    report["notes"] = [
      "MoE on the CPU compiler: jax.lax.ragged_dot is lowered densely over the experts "
      "(temporaries grow with tokens x experts x width), so the compiled temporaries of the "
      "update and the prefill overstate a TPU / GPU grouped matmul; the train state (the "
      "update's arguments) and the KV cache are exact"
    ]
  if hbm_gib is not None:
    report["hbm_gib"] = hbm_gib
    report["fits"] = bool(need <= hbm_gib * GIB)
  return report


def _gib(n: float) -> str:
  return f"{n / GIB:9.3f} GiB"


def format_report(r: dict) -> str:
  s, m = r["shapes"], r["model"]
  mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items())
  rows = s["batch"] // s["micro_batches"]
  lines = [
    f"model {m['path']}: {m['params'] / 1e9:.2f}B parameters, {m['layers']} layers"
    + (f", {m['experts']} experts" if m["experts"] else "")
    + f", {m['dtype']} compute, float32 master weights, remat {m['remat']}",
    f"mesh {mesh} ({r['devices']} devices); per-device bytes from XLA's memory analysis of the "
    "compiled SPMD program (CPU compiler, fake devices)",
    f"update: batch {s['batch']} x {s['seq']} tokens, {s['micro_batches']} micro-batches of "
    f"{rows} rows, KL reference {'on' if r['kl_reference'] else 'off'}",
  ]

  def mem(name):
    x = r["memory"][name]
    return (
      f"  compiled  argument {x['argument']} B  output {x['output']} B  temp {x['temp']} B  "
      f"alias {x['alias']} B  generated_code {x['generated_code']} B  peak {x['peak']} B "
      f"({x['peak'] / GIB:.3f} GiB)"
    )

  lines.append(mem("update"))
  a = r["analytic"]["update"]
  lines.append(
    "  analytic  "
    + "  ".join(f"{k} {_gib(v).strip()}" for k, v in a.items() if k != "total")
    + f"  total {_gib(a['total']).strip()}"
  )
  f = r["flops"]
  xla = "n/a" if f["update_xla"] is None else f"{f['update_xla']:.4g}"
  lines.append(
    f"  flops per device: XLA cost analysis {xla}, analytic {f['update_analytic']:.4g} "
    "(XLA counts a scanned loop body once)"
  )
  lines.append(
    f"sampler: {s['sample_batch']} sequences, {s['context']} cache slots (bfloat16), "
    f"{s['prompt']} prompt slots"
  )
  lines.append("  prefill" + mem("prefill")[1:])
  lines.append("  decode " + mem("decode")[1:])
  a = r["analytic"]["sampler"]
  lines.append(
    "  analytic  "
    + "  ".join(f"{k} {_gib(v).strip()}" for k, v in a.items() if k != "total")
    + f"  total {_gib(a['total']).strip()}"
  )
  lines.append(
    f"  sampler peak with the rest of the train state resident: {r['sampler_peak']} B "
    f"({r['sampler_peak'] / GIB:.3f} GiB)"
  )
  sec = r["seconds"]
  lines.append(
    f"compile seconds: lower {sec['lower']}, update {sec['update']}, prefill {sec['prefill']}, "
    f"decode {sec['decode']}"
  )
  lines += [f"note: {n}" for n in r.get("notes", [])]
  lines.append(
    f"floor per device (train state + float32 gradient): {r['state_floor']} B "
    f"({r['state_floor'] / GIB:.3f} GiB)"
  )
  verdict = f"peak per device {r['peak']} B ({r['peak'] / GIB:.3f} GiB)"
  if "fits" in r:
    verdict += f": {'fits' if r['fits'] else 'does NOT fit'} {r['hbm_gib']} GiB"
  lines.append(verdict)
  return "\n".join(lines)
