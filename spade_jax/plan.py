"""Compiled memory plans: will a config's GRPO update and sampler fit a target's accelerators?

  python -m spade_jax.plan --config experiments/configs/qwen3.py:8b --mesh data=1,fsdp=8,tensor=1
  python -m spade_jax.plan --config experiments/configs/tool_use.py:30b_a3b \
      --mesh fsdp=16 --micro_batches 48 --seq 32768 --hbm 16 --json

Before jax is imported, ``XLA_FLAGS`` gets ``--xla_force_host_platform_device_count=<mesh
size>``, so a fake CPU mesh of the target's size exists. The model config comes from the
config's ``model.path`` without weights: an architecture preset (`spade_jax.models.presets`,
the hub ids of the paper's Qwen3 models) or a local directory's ``config.json``. Then, on
abstract inputs only (``jax.ShapeDtypeStruct`` with shardings, ``nnx.eval_shape``; no weight is
allocated), it lowers and compiles

* the GRPO update: `spade_jax.rl.update.train_step` jitted exactly as `make_update` does
  (state and batch shardings, state donated) for the config's global batch, micro-batches,
  sequence length (``train.seq_len``, else the longest context a sample can have), compute
  dtype, rematerialisation and KL reference;
* the sampler: `spade_jax.engine.decode.prefill` (a prompt into a fresh KV cache) and the
  decode loop `spade_jax.engine.decode.run_loop` (the engine's ``run``: a ``while_loop`` of
  decode steps, state donated), over the train state's parameters (the loop samples from
  them) with the cache in bfloat16 (the engine's choice on accelerators), for the sampling
  batch (every episode of a step: ``num_games x (plays + hint_plays)``) and the agent's
  context,

with the sharding rules the runner uses (`spade_jax.sharding`), and prints per device the bytes
of XLA's memory analysis of each compiled executable (arguments, outputs, temporaries, aliased
= donated, generated code; peak = arguments + outputs - aliased + temporaries) beside an
analytic estimate, and the update's FLOPs from XLA's cost analysis. While sampling, the rest of
the train state (Adam moments, reference parameters) stays on the device: the sampler's total
adds it. ``--hbm GiB`` says whether the largest of those fits.

Caveats: this is the CPU compiler's memory analysis of the SPMD-partitioned program; the TPU and
GPU compilers schedule, fuse and rematerialise differently (usually with less temporary memory
on TPU) and reserve memory of their own (runtime, collectives' buffers, fragmentation); none of
that is counted. Bad input (unknown size, a mesh whose product does not match, unknown mesh
axes) prints one line on stderr and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

GIB = 1024**3


class PlanError(Exception):
  """Bad input to the plan: one line, exit 2."""


# ---------------------------------------------------------------------------------- arguments
def parse_mesh(text: str) -> dict[str, int]:
  """``"data=1,fsdp=8,tensor=1"`` -> ``{"data": 1, "fsdp": 8, "tensor": 1}`` (names are checked
  against the sharding module's axes once jax may be imported)."""
  out: dict[str, int] = {}
  for part in (p.strip() for p in text.split(",") if p.strip()):
    name, sep, size = part.partition("=")
    name = name.strip()
    if not sep or not name or not size.strip().isdigit() or int(size) < 1:
      raise PlanError(f"--mesh {text!r}: expected name=size pairs with sizes >= 1, e.g. fsdp=8")
    if name in out:
      raise PlanError(f"--mesh {text!r}: axis {name!r} given twice")
    out[name] = int(size)
  if not out:
    raise PlanError("--mesh is empty: give name=size pairs, e.g. data=1,fsdp=8,tensor=1")
  return out


def set_device_count(n: int, env=None) -> None:
  """Puts ``--xla_force_host_platform_device_count=n`` into ``XLA_FLAGS`` (replacing any) and
  selects the CPU platform: call before jax is imported."""
  env = os.environ if env is None else env
  flag = "--xla_force_host_platform_device_count"
  kept = [w for w in env.get("XLA_FLAGS", "").split() if not w.startswith(flag + "=")]
  env["XLA_FLAGS"] = " ".join(kept + [f"{flag}={n}"])
  env["JAX_PLATFORMS"] = "cpu"


def load_config(spec: str):
  """``path.py[:arg]`` -> the config its ``get_config(arg)`` returns."""
  path, _, arg = spec.partition(":")
  if not Path(path).is_file():
    raise PlanError(f"--config: no config file {path!r}")
  mod_spec = importlib.util.spec_from_file_location(f"plan_config_{Path(path).stem}", path)
  module = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(module)
  try:
    return module.get_config(arg) if arg else module.get_config()
  except (ValueError, KeyError) as e:
    raise PlanError(f"--config {spec}: {e}") from e


def apply_overrides(config, pairs: list[str]) -> None:
  """``--set key.sub=value`` overrides, the value parsed as the field's current type."""
  for pair in pairs:
    key, sep, value = pair.partition("=")
    if not sep:
      raise PlanError(f"--set {pair!r}: expected key=value")
    target, parts = config, key.split(".")
    try:
      for p in parts[:-1]:
        target = target[p]
      name = parts[-1]
      old = target[name]
    except (KeyError, AttributeError) as e:
      raise PlanError(f"--set {pair!r}: the config has no field {key!r}") from e
    try:
      if isinstance(old, bool):
        new: Any = value.lower() in ("1", "true", "yes")
      elif isinstance(old, (int, float, str)):
        new = type(old)(value)
      elif isinstance(old, tuple):
        new = tuple(int(v) for v in value.strip("()").split(",") if v.strip())
      else:
        new = value
    except ValueError as e:
      raise PlanError(f"--set {pair!r}: {e}") from e
    target[name] = new


def model_config(config):
  """The config's `TransformerConfig` without weights: a preset or a directory's config.json."""
  import jax.numpy as jnp

  from spade_jax.models import presets
  from spade_jax.models.config import CheckpointError, from_hf_config

  path = config.model.path
  kw = dict(dtype=jnp.dtype(config.model.dtype), param_dtype=jnp.float32, remat=config.model.remat)
  try:
    if path in presets.PRESETS:
      return presets.preset_config(path, **kw)
    cfg_json = Path(path) / "config.json"
    if cfg_json.is_file():
      return from_hf_config(json.loads(cfg_json.read_text()), **kw)
  except (CheckpointError, ValueError) as e:
    raise PlanError(f"model {path!r}: {e}") from e
  raise PlanError(
    f"model.path={path!r} is neither an architecture preset ({', '.join(presets.PRESETS)}) "
    "nor a directory with a config.json"
  )


# ------------------------------------------------------------------------------------ shapes
@dataclasses.dataclass(frozen=True)
class Shapes:
  """What is compiled: the update's batch / micro-batches / length, the sampler's batch /
  cache slots / prompt slots."""

  batch: int
  micro_batches: int
  seq: int
  sample_batch: int
  context: int
  prompt: int


def _pow2(n: int) -> int:
  return 1 << max(0, int(n) - 1).bit_length()


def agent_context(config) -> int:
  """KV-cache slots of an agent episode: the on-device rollout's, else the host loop's."""
  if config.setting == "games" and config.agent.device_rollout:
    return int(config.agent.device_context)
  return int(config.agent.max_context)


def default_shapes(config, args) -> Shapes:
  """The config's shapes, overridden by the command line. The update's length is
  ``train.seq_len`` or the power-of-two bucket of the longest row a step can produce (the
  designer's and the agent's context)."""
  seq = args.seq or config.train.seq_len
  if not seq:
    seq = _pow2(max(config.designer.max_context, agent_context(config)))
  s = config.spade
  sample_batch = args.sample_batch or s.num_games * (s.plays + s.hint_plays)
  context = args.context or agent_context(config)
  prompt = args.prompt or min(
    int(config.agent.device_prompt_len) if config.setting == "games" else 1024, context // 2
  )
  shapes = Shapes(
    batch=args.batch or config.train.global_batch,
    micro_batches=args.micro_batches or config.train.micro_batches,
    seq=int(seq),
    sample_batch=int(sample_batch),
    context=int(context),
    prompt=int(prompt),
  )
  if shapes.batch % shapes.micro_batches:
    raise PlanError(
      f"batch {shapes.batch} is not divisible by micro_batches {shapes.micro_batches}"
    )
  if not 0 < shapes.prompt < shapes.context:
    raise PlanError(f"prompt slots {shapes.prompt} must lie in (0, context={shapes.context})")
  return shapes


# ------------------------------------------------------------------------------- compilation
def make_mesh(mesh_sizes: dict[str, int]):
  """The mesh over this process's (fake) devices, axes in the sharding module's order; axes
  the command line leaves out have size 1."""
  import jax

  from spade_jax import sharding

  known = tuple(sharding.MESH_AXES)
  unknown = [a for a in mesh_sizes if a not in known]
  if unknown:
    raise PlanError(f"--mesh: unknown axis {unknown[0]!r}; axes: {', '.join(known)}")
  n = math.prod(mesh_sizes.values())
  if n != len(jax.devices()):
    raise PlanError(f"--mesh needs {n} devices, this process has {len(jax.devices())}")
  shape = tuple(mesh_sizes.get(a, 1) for a in known)
  return sharding.make_mesh(shape, known)


def memory_stats(compiled) -> dict[str, int]:
  """Per-device bytes of a compiled executable's memory analysis (peak = arguments + outputs
  - aliased + temporaries)."""
  m = compiled.memory_analysis()
  out = {
    "argument": int(m.argument_size_in_bytes),
    "output": int(m.output_size_in_bytes),
    "temp": int(m.temp_size_in_bytes),
    "alias": int(m.alias_size_in_bytes),
    "generated_code": int(m.generated_code_size_in_bytes),
  }
  out["peak"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
  return out


def cost_flops(compiled) -> float | None:
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  if not cost:
    return None
  return float(cost.get("flops", 0.0)) or None


def _abstract(tree, shardings):
  import jax

  return jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
  )


def per_device_bytes(tree) -> int:
  """Bytes one device holds of an abstract tree with shardings (the largest shard)."""
  import jax
  import numpy as np

  total = 0
  for x in jax.tree.leaves(tree):
    shape = x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape
    total += int(np.prod(shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize
  return total


@dataclasses.dataclass
class Programs:
  """The lowered programs of a plan and the abstract train state."""

  model_cfg: Any
  mesh: Any
  state: Any  # abstract TrainState with shardings
  update: Any  # jax.stages.Lowered
  prefill: Any
  decode_fn: Any  # jitted run loop (lowered after prefill compiles: its input is prefill's output)
  decode_args: Any
  with_reference: bool


def abstract_train_state(config, model_cfg, mesh):
  """``(graphdef, abstract TrainState with shardings, optimizer)``: what
  `create_train_state` builds, never allocated."""
  import jax
  import jax.numpy as jnp
  from flax import nnx

  from spade_jax.models import Transformer
  from spade_jax.rl.optimizer import make_optimizer
  from spade_jax.rl.train_state import TrainState, state_shardings
  from spade_jax.spade import config as spade_config

  optimizer = make_optimizer(spade_config.optimizer_config(config))
  abstract_model = nnx.eval_shape(lambda: Transformer(model_cfg, rngs=nnx.Rngs(0)))
  graphdef, params = nnx.split(abstract_model)
  with_ref = config.train.kl_coef > 0

  def init(params):
    return TrainState(
      step=jnp.zeros((), jnp.int32),
      params=params,
      opt_state=optimizer.init(params),
      rng=jax.random.PRNGKey(config.seed),
      ref_params=jax.tree.map(jnp.copy, params) if with_ref else None,
    )

  abstract = jax.eval_shape(init, params)
  shardings = state_shardings(abstract, mesh)
  return graphdef, _abstract(abstract, shardings), optimizer, shardings


def lower(config, model_cfg, mesh, shapes: Shapes) -> Programs:
  """Lowers the update, the prefill and (as a jitted function) the decode loop."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from spade_jax import sharding, trajectories
  from spade_jax.engine import decode
  from spade_jax.engine.sampling import SamplingParams
  from spade_jax.rl import update as rl_update
  from spade_jax.rl.optimizer import learning_rate_schedule
  from spade_jax.spade import config as spade_config

  graphdef, state, optimizer, state_sh = abstract_train_state(config, model_cfg, mesh)
  loss_cfg = spade_config.loss_config(config)
  schedule = learning_rate_schedule(spade_config.optimizer_config(config))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

  # the update, jitted as rl.update.make_update does for a mesh
  B, T, M = shapes.batch, shapes.seq, shapes.micro_batches
  row = trajectories.empty(1, 1)
  batch = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(
      (B, T) if np.ndim(x) == 2 else (B,),
      x.dtype,
      sharding=sharding.named_sharding(
        mesh,
        trajectories.BATCH_AXES + (None,) * (np.ndim(x) - 1),
        (B, T) if np.ndim(x) == 2 else (B,),
      ),
    ),
    row,
  )
  batch_sh = jax.tree.map(lambda x: x.sharding, batch)

  def update_fn(state, batch):
    return rl_update.train_step(
      graphdef, optimizer, schedule, loss_cfg, state, batch, micro_batches=M
    )

  update_jit = jax.jit(
    update_fn,
    in_shardings=(state_sh, batch_sh),
    out_shardings=(state_sh, replicated),
    donate_argnums=0,
  )

  # the sampler over the train state's parameters
  SB, S, P = shapes.sample_batch, shapes.context, shapes.prompt
  chunk = min(512, P)
  P = -(-P // chunk) * chunk
  if P >= S:
    raise PlanError(f"prompt slots {P} (chunks of {chunk}) must be < context {S}")

  def rep(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=replicated)

  prefill_args = (
    state.params,
    rep((SB, P), jnp.int32),
    rep((SB, P), jnp.bool_),
    rep((SB, P), jnp.int32),
    rep((SB,), jnp.int32),
    rep((SB,), jnp.int32),
    rep((SB, 4), jnp.int32),
    rep((2,), jnp.uint32),
  )

  def prefill_fn(params, *arrays):
    return decode.prefill(
      graphdef,
      params,
      *arrays,
      cache_size=S,
      chunk=chunk,
      queue_size=128,
      cache_dtype=jnp.bfloat16,
      processor=None,
    )

  def run_fn(params, state, sampling, max_steps):
    return decode.run_loop(graphdef, params, state, sampling, None, max_steps)

  sampling = SamplingParams.make(
    SB,
    temperature=config.agent.temperature,
    top_p=config.agent.top_p,
    top_k=config.agent.top_k,
  )
  with sharding.use_mesh(mesh):
    update_lowered = update_jit.lower(state, batch)
    prefill_lowered = jax.jit(prefill_fn).lower(*prefill_args)
  sampling_abs = jax.tree.map(lambda x: rep(np.shape(x), np.asarray(x).dtype), sampling)
  return Programs(
    model_cfg=model_cfg,
    mesh=mesh,
    state=state,
    update=update_lowered,
    prefill=prefill_lowered,
    decode_fn=jax.jit(run_fn, donate_argnums=(1,)),
    decode_args=(state.params, None, sampling_abs, rep((), jnp.int32)),
    with_reference=state.ref_params is not None,
  )


def compile_programs(programs: Programs) -> dict[str, Any]:
  """``{"update", "prefill", "decode"}`` -> ``(compiled, seconds)``; the decode loop is lowered
  on the prefill's output (its shapes and shardings)."""
  import jax

  from spade_jax import sharding

  out = {}
  for name in ("update", "prefill"):
    t0 = time.perf_counter()
    out[name] = (getattr(programs, name).compile(), time.perf_counter() - t0)
  prefill = out["prefill"][0]
  state_abs = jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
    programs.prefill.out_info,
    prefill.output_shardings,
  )
  params, _, sampling, steps = programs.decode_args
  t0 = time.perf_counter()
  with sharding.use_mesh(programs.mesh):
    lowered = programs.decode_fn.lower(params, state_abs, sampling, steps)
  out["decode"] = (lowered.compile(), time.perf_counter() - t0)
  return out


# -------------------------------------------------------------------------- analytic estimate
def analytic(config, programs: Programs, shapes: Shapes) -> dict[str, dict[str, int]]:
  """Per-device bytes estimated by hand: the train state from its shardings (exact), the
  update's activations and the sampler's KV cache from the shapes."""
  cfg, mesh, state = programs.model_cfg, programs.mesh, programs.state
  params = per_device_bytes(state.params)
  opt = per_device_bytes(state.opt_state)
  ref = per_device_bytes(state.ref_params) if state.ref_params is not None else 0
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
  sampler = {
    "params": params,
    # the decode loop and the prefill gather every layer's float32 weights (XLA hoists the
    # FSDP all-gather out of the loop over layers / steps: measured, BUILD_NOTES)
    "gathered_weights": cfg.num_params * 4 // tp,
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
  mesh = make_mesh(mesh_sizes)
  t0 = time.perf_counter()
  programs = lower(config, model_cfg, mesh, shapes)
  lower_s = time.perf_counter() - t0
  compiled = compile_programs(programs)
  est = analytic(config, programs, shapes)
  n = len(jax.devices())
  memory = {name: memory_stats(c) for name, (c, _) in compiled.items()}
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
      "update_xla": cost_flops(compiled["update"][0]),
      "update_analytic": update_flops_analytic(
        config, model_cfg, shapes, n, programs.with_reference
      ),
    },
    "seconds": {"lower": round(lower_s, 1)}
    | {name: round(s, 1) for name, (_, s) in compiled.items()},
  }
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
  verdict = f"peak per device {r['peak']} B ({r['peak'] / GIB:.3f} GiB)"
  if "fits" in r:
    verdict += f": {'fits' if r['fits'] else 'does NOT fit'} {r['hbm_gib']} GiB"
  lines.append(verdict)
  return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m spade_jax.plan", description=__doc__.split("\n")[0])
  p.add_argument("--config", required=True, help="experiment config file[:arg]")
  p.add_argument("--mesh", required=True, help="name=size pairs, e.g. data=1,fsdp=8,tensor=1")
  p.add_argument("--devices", type=int, default=0, help="the target's chips (checks --mesh)")
  p.add_argument("--micro_batches", type=int, default=0, help="default: train.micro_batches")
  p.add_argument("--seq", type=int, default=0, help="update length (default: the config's)")
  p.add_argument("--batch", type=int, default=0, help="update batch (default: global_batch)")
  p.add_argument("--sample_batch", type=int, default=0, help="sampler sequences")
  p.add_argument("--context", type=int, default=0, help="sampler cache slots")
  p.add_argument("--prompt", type=int, default=0, help="sampler prompt slots")
  p.add_argument("--hbm", type=float, default=None, help="GiB per device: say fits / not")
  p.add_argument("--set", action="append", default=[], help="config override key=value")
  p.add_argument("--json", action="store_true", help="print the report as JSON")
  return p


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    raise PlanError(message)


def main(argv: list[str] | None = None) -> int:
  parser = build_parser()
  parser.__class__ = _Parser
  try:
    args = parser.parse_args(argv)
    mesh_sizes = parse_mesh(args.mesh)
    n = math.prod(mesh_sizes.values())
    if args.devices and args.devices != n:
      raise PlanError(f"--mesh {args.mesh} has {n} devices, --devices says {args.devices}")
    for name in ("devices", "micro_batches", "seq", "batch", "sample_batch", "context", "prompt"):
      if getattr(args, name) < 0:
        raise PlanError(f"--{name} must be positive")
    if args.hbm is not None and args.hbm <= 0:
      raise PlanError("--hbm must be positive")
    if "jax" not in sys.modules:
      set_device_count(n)
    from spade_jax import xla_cpu

    xla_cpu.pin_isa()
    config = load_config(args.config)
    apply_overrides(config, args.set)
    shapes = default_shapes(config, args)
    report = plan(config, mesh_sizes, shapes, args.hbm)
  except PlanError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(json.dumps(report, indent=1) if args.json else format_report(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
