"""``TrainState``: everything the update reads and writes, as one pytree (checkpointed whole).

The model's graph definition (``nnx.split(model)[0]``) is static and lives outside the state;
``params`` is the ``nnx.State`` of the policy (float32 master weights whatever the compute
dtype), ``opt_state`` the optax state (same sharding as the parameters it mirrors), ``rng`` a raw
``uint32[2]`` key the training loop splits for sampling (the update itself draws no randomness),
and ``ref_params`` the frozen reference policy for the KL term (None when ``kl_coef`` is 0, so no
memory is spent on it).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from spade_jax import sharding


@struct.dataclass
class TrainState:
  step: jax.Array  # int32 scalar: number of update calls (applied or skipped)
  params: Any  # nnx.State of the policy
  opt_state: Any
  rng: jax.Array  # uint32[2] PRNG key (raw, so it checkpoints as a plain array)
  ref_params: Any = None  # nnx.State of the reference policy, or None


def split_model(model: nnx.Module):
  """``(graphdef, params)``; params are checked to be float32 (the master weights)."""
  graphdef, params = nnx.split(model)
  bad = sorted({str(x.dtype) for x in jax.tree.leaves(params)} - {"float32"})
  if bad:
    raise ValueError(f"master weights must be float32 (set param_dtype=float32), found {bad}")
  return graphdef, params


def state_shardings(state: TrainState, mesh) -> TrainState:
  """NamedShardings of a (possibly abstract) TrainState: params, their optimizer moments and the
  reference params by their logical axes; step and rng replicated."""
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  return TrainState(
    step=replicated,
    params=sharding.state_shardings(state.params, mesh),
    opt_state=sharding.state_shardings(state.opt_state, mesh),
    rng=replicated,
    ref_params=None
    if state.ref_params is None
    else sharding.state_shardings(state.ref_params, mesh),
  )


def create_train_state(
  model: nnx.Module,
  optimizer: optax.GradientTransformation,
  *,
  seed: int = 0,
  with_reference: bool = False,
  mesh=None,
):
  """Builds the initial state (optimizer state initialised under jit, directly in the
  parameters' shardings when ``mesh`` is given). The reference params are a copy of the
  policy's. Returns ``(graphdef, state)``."""
  graphdef, params = split_model(model)

  def init(params):
    return TrainState(
      step=jnp.zeros((), jnp.int32),
      params=params,
      opt_state=optimizer.init(params),
      rng=jax.random.PRNGKey(seed),
      ref_params=jax.tree.map(jnp.copy, params) if with_reference else None,
    )

  if mesh is None:
    return graphdef, jax.jit(init)(params)
  abstract = jax.eval_shape(init, params)
  out = state_shardings(abstract, mesh)
  with sharding.use_mesh(mesh):
    params = jax.device_put(params, out.params)
    return graphdef, jax.jit(init, in_shardings=(out.params,), out_shardings=out)(params)


def abstract_state(state: TrainState) -> TrainState:
  """ShapeDtypeStructs (with shardings) of a concrete state: the restore target of a
  checkpoint."""
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)), state
  )


def with_params(graphdef, state: TrainState) -> nnx.Module:
  """The policy module for the state's current parameters (e.g. to hand to the sampler)."""
  return nnx.merge(graphdef, state.params)
