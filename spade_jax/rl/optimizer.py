"""The optax optimizer of the GRPO update: global-norm clipping, Adam/AdamW, lr schedules.

Defaults are the SPADE recipe: Adam with decoupled weight decay 0.1 (Megatron's "adam" with
``weight_decay`` is AdamW), constant lr 1e-6, betas (0.9, 0.98), gradients clipped to global norm
1.0. Norm scales and biases are not decayed (Megatron's default); this is decided by parameter
name because stacked layers make every block parameter at least 2-D.
"""

from __future__ import annotations

import dataclasses

import jax
import optax

SCHEDULES = ("constant", "cosine", "linear")
NO_DECAY_SUFFIXES = ("norm", "bias")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """name: ``adamw`` (decoupled weight decay) or ``adam`` (no weight decay).
  learning_rate: peak learning rate. schedule: ``constant``, ``cosine`` or ``linear`` decay to
  ``min_lr_ratio * learning_rate`` over ``decay_steps`` after ``warmup_steps`` of linear warmup.
  b1, b2, eps: Adam moments. weight_decay: decoupled decay (not on norms and biases).
  grad_clip_norm: clip gradients to this global norm (None = no clipping).
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

  def __post_init__(self):
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
  """The optimizer chain; its state is f32 like the master weights it updates."""
  lr = learning_rate_schedule(cfg)
  parts = []
  if cfg.grad_clip_norm is not None:
    parts.append(optax.clip_by_global_norm(cfg.grad_clip_norm))
  if cfg.name == "adamw":
    parts.append(
      optax.adamw(
        lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask
      )
    )
  else:
    parts.append(optax.adam(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps))
  return optax.chain(*parts)
