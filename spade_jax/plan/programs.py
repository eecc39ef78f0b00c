"""The plan's programs: the update and the sampler lowered and compiled on abstract inputs."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from spade_jax.plan.args import PlanError, Shapes


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
