"""The optax optimizer of the GRPO update: global-norm clipping, Adam/AdamW, lr schedules.

Defaults are the SPADE recipe: Adam with decoupled weight decay 0.1 (Megatron's "adam" with
``weight_decay`` is AdamW), constant lr 1e-6, betas (0.9, 0.98), gradients clipped to global norm
1.0. Norm scales and biases are not decayed (Megatron's default); this is decided by parameter
name because stacked layers make every block parameter at least 2-D.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

SCHEDULES = ("constant", "cosine", "linear")
NO_DECAY_SUFFIXES = ("norm", "bias")
MOMENT_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """name: ``adamw`` (decoupled weight decay) or ``adam`` (no weight decay).
  learning_rate: peak learning rate. schedule: ``constant``, ``cosine`` or ``linear`` decay to
  ``min_lr_ratio * learning_rate`` over ``decay_steps`` after ``warmup_steps`` of linear warmup.
  b1, b2, eps: Adam moments. weight_decay: decoupled decay (not on norms and biases).
  grad_clip_norm: clip gradients to this global norm (None = no clipping).
  moments_dtype: the dtype Adam's two moments are stored in (``float32``, or ``bfloat16`` to
  halve their memory: each update computes in float32 from the stored values and rounds the
  new moments back, the memory a 30B-A3B train state needs to fit an 8xH100 node).
  """

  name: str = "adamw"
  learning_rate: float = 1e-6
  schedule: str = "constant"
  warmup_steps: int = 0
  decay_steps: int = 0
  min_lr_ratio: float = 0.0
  b1: float = 0.9
  b2: float = 0.98
  eps: float = 1e-8
  weight_decay: float = 0.1
  grad_clip_norm: float | None = 1.0
  moments_dtype: str = "float32"

  def __post_init__(self):
    if self.moments_dtype not in MOMENT_DTYPES:
      raise ValueError(f"moments_dtype={self.moments_dtype!r}; expected one of {MOMENT_DTYPES}")
    if self.name not in ("adam", "adamw"):
      raise ValueError(f"optimizer name={self.name!r}; expected adam or adamw")
    if self.schedule not in SCHEDULES:
      raise ValueError(f"schedule={self.schedule!r}; expected one of {SCHEDULES}")
    if self.schedule != "constant" and self.decay_steps <= 0:
      raise ValueError(f"schedule={self.schedule!r} needs decay_steps > 0")


def learning_rate_schedule(cfg: OptimizerConfig) -> optax.Schedule:
  peak, floor = cfg.learning_rate, cfg.learning_rate * cfg.min_lr_ratio
  if cfg.schedule == "constant":
    main = optax.constant_schedule(peak)
  elif cfg.schedule == "cosine":
    main = optax.cosine_decay_schedule(peak, cfg.decay_steps, alpha=cfg.min_lr_ratio)
  else:
    main = optax.linear_schedule(peak, floor, cfg.decay_steps)
  if not cfg.warmup_steps:
    return main
  warmup = optax.linear_schedule(0.0, peak, cfg.warmup_steps)
  return optax.join_schedules([warmup, main], [cfg.warmup_steps])


def decay_mask(params):
  """True for parameters that get weight decay (everything but norm scales and biases)."""

  def keep(path, _):
    names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
    names = [n for n in names if n != "value"]
    return not (names and names[-1].endswith(NO_DECAY_SUFFIXES))

  return jax.tree_util.tree_map_with_path(keep, params)


def make_optimizer(cfg: OptimizerConfig = OptimizerConfig()) -> optax.GradientTransformation:
  """The optimizer chain; its state is f32 like the master weights it updates, or Adam's
  moments stored in ``cfg.moments_dtype``."""
  lr = learning_rate_schedule(cfg)
  parts = []
  if cfg.grad_clip_norm is not None:
    parts.append(optax.clip_by_global_norm(cfg.grad_clip_norm))
  if cfg.name == "adamw":
    adam = optax.adamw(
      lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask
    )
  else:
    adam = optax.adam(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
  if cfg.moments_dtype != "float32":
    adam = stored_as(adam, jnp.dtype(cfg.moments_dtype))
  parts.append(adam)
  return optax.chain(*parts)


def stored_as(inner: optax.GradientTransformation, dtype) -> optax.GradientTransformation:
  """``inner`` with its floating-point state stored in ``dtype``: each update widens the stored
  state to float32, runs ``inner`` and rounds its new state back (integer state, such as
  Adam's step count, is kept as it is)."""

  def narrow(state):
    return jax.tree.map(lambda x: x.astype(dtype) if _is_float(x) else x, state)

  def widen(state):
    return jax.tree.map(lambda x: x.astype(jnp.float32) if _is_float(x) else x, state)

  def init(params):
    return narrow(inner.init(params))

  def update(updates, state, params=None):
    updates, new = inner.update(updates, widen(state), params)
    return updates, narrow(new)

  return optax.GradientTransformation(init, update)


def _is_float(x) -> bool:
  return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)
