"""The jitted GRPO update: one optimizer step on a ``Trajectories`` batch.

``make_update(graphdef, ...)`` returns an :class:`UpdateStep` callable ``(state, batch) ->
(state, metrics)``, compiled once per batch shape with explicit in/out shardings and the state
donated (updated in place). Inside:

1. the batch (``B`` rows) is split into ``micro_batches`` interleaved micro-batches (row
   ``i`` goes to micro-batch ``i % M``, so each device keeps its own rows: no data movement);
2. ``lax.scan`` over micro-batches accumulates float32 gradients of the policy loss, whose
   reductions use the global batch size and token count, so the sum is the full-batch gradient;
3. ``logp_old`` is the stop-gradient of the same forward pass (one optimizer step per batch:
   old == current parameters at the start of the step), so the TIS weight costs no extra pass;
   the reference forward runs only when ``kl_coef > 0``;
4. a non-finite loss or gradient norm skips the step (parameters and optimizer state are kept,
   ``train/update_skipped`` is 1) instead of applying it.

Metrics (device scalars, replicated): ``train/loss``, ``train/pg_loss``, ``train/clip_frac``,
``train/tis_clipped_frac``, ``train/tis_weight_mean``, ``train/approx_kl`` (sampler vs trainer),
``train/entropy``, ``train/ref_kl`` and ``train/kl_loss`` (when ``kl_coef > 0``),
``train/grad_norm`` (before clipping), ``train/lr`` (0 when skipped), ``train/update_skipped``,
``train/loss_tokens``, ``train/valid_samples`` and per role ``train/{agent,designer}_samples``,
``_tokens``, ``_adv_mean``; for an MoE model with ``LossConfig.router_aux_coef > 0``,
``train/router_aux_loss`` (the load-balancing loss before its coefficient, which is added to
the loss as ``router_aux_coef * aux``; see :func:`batch_loss`). Rematerialisation is the model's
``TransformerConfig.remat``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from spade_jax import multihost, sharding, trajectories
from spade_jax.models import moe
from spade_jax.rl import losses
from spade_jax.rl.optimizer import OptimizerConfig, learning_rate_schedule, make_optimizer
from spade_jax.rl.train_state import TrainState, state_shardings
from spade_jax.trajectories import ROLE_AGENT, ROLE_DESIGNER, Trajectories

_F32 = jnp.float32


def batch_loss(
  graphdef,
  params,
  batch: Trajectories,
  cfg: losses.LossConfig,
  *,
  global_batch,
  global_tokens,
  ref_params=None,
  old_logp_BT=None,
):
  """Loss of one (micro-)batch under ``params`` and its summed statistics.

  ``old_logp_BT`` defaults to the stop-gradient of the current log-probs (the update's case);
  passing it explicitly makes the loss an ordinary function of ``params`` (used to check the
  update's gradient against finite differences).
  """
  model = nnx.merge(graphdef, params)
  aux_coef = cfg.router_aux_coef if model.cfg.num_experts else 0.0
  if aux_coef:  # an MoE model with the load-balancing loss: the same forward, router logits kept
    hidden_BTD, _, router_LBTE = model.hidden_and_router(batch.tokens_BT)
    logp_BT, entropy_BT = losses.token_logprobs(
      hidden_BTD,
      model.unembed_matrix(),
      batch.tokens_BT,
      temperature=cfg.temperature,
      chunk=cfg.logprob_chunk,
      compute_dtype=model.cfg.dtype,
      entropy_grad=bool(cfg.entropy_coef),
      start=cfg.loss_start,
    )
  else:
    logp_BT, entropy_BT = losses.model_logprobs(
      model, batch.tokens_BT, cfg, entropy_grad=bool(cfg.entropy_coef)
    )
  if old_logp_BT is None:
    old_logp_BT = jax.lax.stop_gradient(logp_BT)
  ref_logp_BT = None
  if cfg.kl_coef:
    if ref_params is None:
      raise ValueError(
        "kl_coef > 0 needs TrainState.ref_params (create_train_state(with_reference=True))"
      )
    ref_model = nnx.merge(graphdef, jax.lax.stop_gradient(ref_params))
    ref_logp_BT, _ = losses.model_logprobs(ref_model, batch.tokens_BT, cfg)
  loss, stats = losses.policy_loss(
    logp_BT,
    old_logp_BT,
    batch.rollout_logprobs_BT,
    batch.advantages_B,
    batch.loss_mask_BT,
    cfg,
    global_batch=global_batch,
    global_tokens=global_tokens,
    ref_logp_BT=ref_logp_BT,
    entropy_BT=entropy_BT,
  )
  if aux_coef:
    # transformers' load-balancing loss of this (micro-)batch's tokens, weighted by its share of
    # the global batch's rows: summed over micro-batches, the mean of their aux losses (the
    # loss is not additive over rows; one micro-batch gives exactly that of the whole batch)
    aux = moe.load_balancing_loss(model.cfg, router_LBTE, aux_loss_mask(batch))
    aux = aux * (batch.batch_size / global_batch)
    loss = loss + aux_coef * aux
    stats = dict(stats, loss=loss, router_aux_loss=aux)
  if cfg.loss_start > 1:  # a batch that trains before cfg.loss_start: NaN, the step is skipped
    loss = jnp.where(losses.loss_start_broken(batch.loss_mask_BT, cfg), jnp.nan, loss)
    stats = dict(stats, loss=loss)
  return loss, stats


def aux_loss_mask(batch: Trajectories) -> jax.Array:
  """``[B, T]`` bool: the tokens the router's load-balancing loss counts, each row's positions
  up to its last trained token (prompt, environment turns and responses; not the right
  padding, and nothing of a pad row). Trajectories carry no attention mask, so this stands in
  for transformers' ``attention_mask``."""
  on_BT = batch.loss_mask_BT > 0
  t_T = jnp.arange(on_BT.shape[1])
  last_B = jnp.max(jnp.where(on_BT, t_T[None], -1), axis=1)
  return t_T[None] <= last_B[:, None]


def split_micro_batches(batch: Trajectories, micro_batches: int) -> Trajectories:
  """``[B, ...]`` -> ``[M, B / M, ...]`` with row ``i`` in micro-batch ``i % M``."""
  B = batch.batch_size
  if B % micro_batches:
    raise ValueError(f"batch size {B} is not divisible by micro_batches={micro_batches}")
  return jax.tree.map(
    lambda x: x.reshape(B // micro_batches, micro_batches, *x.shape[1:]).swapaxes(0, 1), batch
  )


def _segments(batch) -> tuple[Trajectories, ...]:
  return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def segment_micro_batches(rows: int, seq_len: int, micro_batches: int, micro_tokens: int) -> int:
  """Micro-batches of a segment of ``rows`` x ``seq_len``: as many of ``micro_batches`` as
  divide its rows (``g = gcd``), or with ``micro_tokens`` (0: no token bound) the fewest
  multiple of ``g`` dividing the rows whose micro-batches hold at most ``micro_tokens`` token
  slots (one row each when no fewer do). A segment of long rows (the designer's) is thereby
  trained a few rows at a time, and so is an odd one (the 15 agent rows beside one designer
  row: halving alone could not split it)."""
  base = math.gcd(micro_batches, rows)
  if not micro_tokens:
    return base
  for m in range(base, rows, base):
    if rows % m == 0 and (rows // m) * seq_len <= micro_tokens:
      return m
  return rows


def loss_and_grads(
  graphdef,
  params,
  batch,
  cfg: losses.LossConfig,
  *,
  micro_batches: int = 1,
  micro_tokens: int = 0,
  ref_params=None,
):
  """Full-batch gradient (float32) accumulated over micro-batches, and the summed statistics.

  ``batch`` is a `Trajectories` or a tuple of them (*segments*): rows of different lengths
  trained as one batch without padding them to a common length (the tiny loop's long designer
  rows and short agent rows). The loss denominators are global over all segments (and the
  ``aggregation`` length constant, when not configured, is the longest segment's), so the
  result equals that of the segments padded to one length and concatenated. Each segment takes
  `segment_micro_batches` micro-batches (``micro_batches`` where its rows allow, more when
  ``micro_tokens`` bounds the token slots of one)."""
  segments = _segments(batch)
  global_batch = jnp.asarray(sum(s.batch_size for s in segments), _F32)
  global_tokens = sum(jnp.sum(s.loss_mask_BT.astype(_F32)) for s in segments)
  if cfg.norm_constant is None and len({s.seq_len for s in segments}) > 1:
    cfg = dataclasses.replace(cfg, norm_constant=max(s.seq_len for s in segments))
  grad_fn = jax.grad(batch_loss, argnums=1, has_aux=True)
  kw = dict(global_batch=global_batch, global_tokens=global_tokens, ref_params=ref_params)

  def one(segment):
    m = segment_micro_batches(segment.batch_size, segment.seq_len, micro_batches, micro_tokens)
    if m == 1:
      grads, stats = grad_fn(graphdef, params, segment, cfg, **kw)
      return jax.tree.map(lambda g: g.astype(_F32), grads), stats
    micro = split_micro_batches(segment, m)

    def micro_step(carry, micro):
      grads_acc, stats_acc = carry
      grads, stats = grad_fn(graphdef, params, micro, cfg, **kw)
      grads_acc = jax.tree.map(lambda a, g: a + g.astype(_F32), grads_acc, grads)
      return (grads_acc, jax.tree.map(jnp.add, stats_acc, stats)), None

    first = jax.tree.map(lambda x: x[0], micro)
    stats_shape = jax.eval_shape(lambda: grad_fn(graphdef, params, first, cfg, **kw)[1])
    zeros_stats = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), stats_shape)
    zeros_grads = jax.tree.map(lambda p: jnp.zeros(p.shape, _F32), params)
    (grads, stats), _ = jax.lax.scan(micro_step, (zeros_grads, zeros_stats), micro)
    return grads, stats

  grads, stats = one(segments[0])
  for segment in segments[1:]:
    # the next segment starts after this one's gradient (and its collectives): independent
    # segments let XLA:CPU's devices issue their all-reduces in different orders, which
    # deadlocked an 8-device run loaded from the compilation cache
    grads, segment = jax.lax.optimization_barrier((grads, segment))
    g, st = one(segment)
    grads = jax.tree.map(jnp.add, grads, g)
    stats = jax.tree.map(jnp.add, stats, st)
  return grads, stats


def _optimizer_count(opt_state):
  counts = [
    x
    for path, x in jax.tree_util.tree_leaves_with_path(opt_state)
    if path and getattr(path[-1], "name", None) == "count"
  ]
  return counts[0] if counts else jnp.zeros((), jnp.int32)


def _batch_metrics(batch) -> dict[str, jax.Array]:
  segments = _segments(batch)
  cat = lambda f: jnp.concatenate([f(s) for s in segments])
  valid_B, role_B = cat(lambda s: s.valid_B), cat(lambda s: s.role_B)
  adv_B = cat(lambda s: s.advantages_B)
  tokens_B = cat(lambda s: jnp.sum(s.loss_mask_BT.astype(_F32), axis=1))
  out = {"train/valid_samples": jnp.sum(valid_B.astype(_F32))}
  for role, name in ((ROLE_AGENT, "agent"), (ROLE_DESIGNER, "designer")):
    sel_B = (role_B == role) & valid_B
    n = jnp.sum(sel_B.astype(_F32))
    out[f"train/{name}_samples"] = n
    out[f"train/{name}_tokens"] = jnp.sum(jnp.where(sel_B, tokens_B, 0.0))
    out[f"train/{name}_adv_mean"] = jnp.sum(jnp.where(sel_B, adv_B, 0.0)) / jnp.maximum(n, 1.0)
  return out


def train_step(
  graphdef,
  optimizer: optax.GradientTransformation,
  schedule,
  cfg,
  state: TrainState,
  batch,
  *,
  micro_batches: int = 1,
  micro_tokens: int = 0,
):
  """The un-jitted update (pure function of state and batch: a `Trajectories` or a tuple of
  segments of different lengths, `loss_and_grads`)."""
  grads, stats = loss_and_grads(
    graphdef,
    state.params,
    batch,
    cfg,
    micro_batches=micro_batches,
    micro_tokens=micro_tokens,
    ref_params=state.ref_params,
  )
  grad_norm = optax.global_norm(grads)
  updates, new_opt = optimizer.update(grads, state.opt_state, state.params)
  new_params = optax.apply_updates(state.params, updates)
  ok = jnp.isfinite(stats["loss"]) & jnp.isfinite(grad_norm)
  keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)
  lr = schedule(_optimizer_count(state.opt_state))
  new_state = state.replace(
    step=state.step + 1,
    params=keep(new_params, state.params),
    opt_state=keep(new_opt, state.opt_state),
  )
  metrics = losses.finalize_stats(stats)
  if "router_aux_loss" in stats:
    metrics["train/router_aux_loss"] = stats["router_aux_loss"]
  metrics.update(_batch_metrics(batch))
  metrics["train/grad_norm"] = grad_norm
  metrics["train/update_skipped"] = (~ok).astype(_F32)
  metrics["train/lr"] = jnp.where(ok, lr, 0.0)
  return new_state, metrics


@dataclasses.dataclass
class UpdateStep:
  """A compiled update. ``trace_count`` counts traces (one per new batch shape)."""

  fn: Any
  trace_count: int = 0
  mesh: Any = None

  def __call__(self, state: TrainState, batch: Trajectories):
    with sharding.use_mesh(self.mesh):
      return self.fn(state, batch)


def make_update(
  graphdef,
  loss_cfg: losses.LossConfig | None = None,
  opt_cfg: OptimizerConfig | None = None,
  *,
  micro_batches: int = 1,
  micro_tokens: int = 0,
  mesh=None,
  state=None,
) -> UpdateStep:
  """Builds the jitted, state-donating update. With ``mesh``, ``state`` (concrete or abstract)
  fixes the state shardings; the batch is sharded over the mesh's batch axes and the metrics
  are replicated. ``None`` configs mean the defaults (the SPADE recipe)."""
  loss_cfg = loss_cfg or losses.LossConfig()
  opt_cfg = opt_cfg or OptimizerConfig()
  optimizer = make_optimizer(opt_cfg)
  schedule = learning_rate_schedule(opt_cfg)
  step = UpdateStep(fn=None, mesh=mesh)

  def fn(state, batch):
    step.trace_count += 1
    return train_step(
      graphdef,
      optimizer,
      schedule,
      loss_cfg,
      state,
      batch,
      micro_batches=micro_batches,
      micro_tokens=micro_tokens,
    )

  if mesh is None:
    step.fn = jax.jit(fn, donate_argnums=0)
    return step
  if state is None:
    raise ValueError("a sharded update needs the state (or its abstract) to fix shardings")
  state_sh = state_shardings(state, mesh)

  def batch_sharding(x):
    return sharding.named_sharding(mesh, trajectories.BATCH_AXES + (None,) * (x.ndim - 1), x.shape)

  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  jitted = {}

  def call(state, batch):
    key = tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(batch))
    if key not in jitted:
      batch_sh = jax.tree.map(batch_sharding, batch)
      jitted[key] = (
        batch_sh,
        jax.jit(
          fn,
          in_shardings=(state_sh, batch_sh),
          out_shardings=(state_sh, replicated),
          donate_argnums=0,
        ),
      )
    batch_sh, jit_fn = jitted[key]
    return jit_fn(state, multihost.from_host(batch, batch_sh))  # global arrays: multi-process

  step.fn = call
  return step
