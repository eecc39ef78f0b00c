"""Configuration of the tiny on-device SPADE front end (``experiments/configs/tiny.py``).

A Qwen3-architecture model trained from scratch on the tiny tokenizer writes environments in
the designer language (`spade_jax.tiny.language`) and plays them on device. The reward
variants, memory, delay and metrics are the SPADE loop's (``spade.*``); see
`spade_jax.tiny.iteration` for the differences.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import ml_collections

from spade_jax.models.config import ATTENTION_IMPLS
from spade_jax.rl.optimizer import SCHEDULES
from spade_jax.spade import rewards
from spade_jax.spade.config import loss_problems
from spade_jax.tiny.language import HINTS


def tiny_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.front_end = "tiny"
  c.seed = 0
  c.steps = 80
  c.checkpoint_every = 10
  c.keep_checkpoints = 2
  c.progress = True
  c.plot_every = 20
  # compile the iteration and held-out evaluation in a child process during the warm start
  # (tiny/compile_ahead.py); uses a persistent compilation cache (yours, else workdir's)
  c.compile_ahead = True
  # training families (warm start, designer skills, fixed pool); the others are held out
  # (tiny/heldout.py); empty: every library family but `heldout.HELDOUT_FAMILIES`
  c.families = ()
  c.records_per_step = 64  # environment records written to workdir/envs per regeneration

  c.model = ml_collections.ConfigDict()  # Qwen3 architecture (q/k norm, GQA, SwiGLU), from scratch
  c.model.embed_dim = 128
  c.model.num_layers = 3
  c.model.num_heads = 4
  c.model.num_kv_heads = 2
  c.model.head_dim = 32
  c.model.mlp_dim = 384
  c.model.rope_theta = 10000.0
  c.model.tie_embeddings = True
  c.model.attention_impl = "reference"  # as the main config's model.attention_impl

  c.spade = ml_collections.ConfigDict()
  c.spade.reward = "blend"  # one of spade.rewards.VARIANTS (blend: the released recipe)
  c.spade.num_games = 8
  c.spade.plays = 8
  c.spade.hint_plays = 4
  c.spade.regen_interval = 2
  # memory seeds off: the tiny designer copies a seed's malformed fragments (with memory on, the
  # valid rate of its attempts fell 0.59 -> 0.19 within 8 steps; off: 0.5-0.69;
  # docs/tiny/RESULTS.md)
  c.spade.memory = False
  # blend / solve_rate: the win-rate band the designer is paid for (0 at the ends, 1 between the
  # middle two): SPADE's (0.15, 0.4, 0.6, 0.85) is for big agents at ~50% success
  c.spade.plateau = (0.15, 0.4, 0.6, 0.85)
  c.spade.reward_scale_cap = 1.0  # SPADE: 50 (designer vs agent token counts of big models)
  c.spade.active_skills = 3  # skills active per regeneration epoch (rotating window)

  c.designer = ml_collections.ConfigDict()
  c.designer.program_tokens = 160  # designer-language tokens per program (grammar-enforced)
  c.designer.prompt_len = 208  # designer prompt slots (skill + one memory seed program)
  c.designer.feasibility_seeds = 4  # the program's own answer must win on this many resets
  c.designer.attempts = 4  # samples per game; the first valid one fills the slot
  c.designer.fallback = True  # no valid attempt: replay the slot's last won game, else library
  # plays of each new pool by the frozen warm-started policy: designer/difficulty_ref, the
  # pool's failure rate against a yardstick that does not learn (0: not measured)
  c.designer.reference_plays = 4
  # hints of the library programs (warm start, fallback, fixed pool): "library", each family's
  # prose hint (useless to the tiny agent: regret ~0.07); "answer" shows the answer register
  # ("The answer is <r>."): the warm-started agent copies it (hinted solve rate ~0.9, regret
  # ~0.55), but with it alone held-out accuracy fell (blend 0.129 -> 0.105, regret -> 0.093)
  c.designer.library_hints = "library"

  c.agent = ml_collections.ConfigDict()
  c.agent.temperature = 1.0
  c.agent.top_p = 1.0
  c.agent.top_k = 0
  c.agent.max_turns = 3
  c.agent.max_new_tokens = 12
  c.agent.max_context = 192  # cache slots of a whole episode
  c.agent.prompt_len = 96  # first-prompt slots
  c.agent.feed_chunk = 16

  c.train = ml_collections.ConfigDict()
  c.train.learning_rate = 2e-4
  c.train.schedule = "constant"  # or cosine / linear decay over the run's steps
  c.train.min_lr_ratio = 0.0  # decay floor, as a fraction of learning_rate
  c.train.warmup_steps = 0
  c.train.b1 = 0.9
  c.train.b2 = 0.98
  c.train.weight_decay = 0.0
  c.train.grad_clip_norm = 1.0
  c.train.eps_low = 0.2
  c.train.eps_high = 0.28
  c.train.tis_cap = 2.0
  c.train.aggregation = "seq_mean_token_mean"
  c.train.norm_constant = 0  # constant_norm's per-sample token budget (0: the batch's length)
  c.train.entropy_coef = 0.0
  c.train.kl_coef = 0.0  # KL to the warm-started policy; 0: no reference forward
  c.train.kl_estimator = "k3"  # k1 / k2 / k3 (used when kl_coef > 0)
  c.train.logprob_chunk = 256  # positions per chunk of the chunked log-softmax (memory knob)
  # the agent's advantages (rl.advantages): zscore (GRPO) or center (Dr.GRPO, no std division)
  c.train.advantage = "zscore"

  c.warm_start = ml_collections.ConfigDict()  # supervised phase standing in for pretraining
  c.warm_start.steps = 600  # 0: start from random weights
  c.warm_start.batch = 32
  c.warm_start.learning_rate = 3e-3
  c.warm_start.max_level = 0  # library levels used (0: the easiest setting of each family)
  c.warm_start.episodes_per_program = 32  # oracle episodes per (program, hinted or not)
  # difficulty variants per training family (tiny/variants.py: every integer knob drawn in
  # [v/2, 2v] around the easiest level), for the designer and the agent; 0: library only.
  # Without them the designer's samples barely respond to its reward; with 32 they move the way
  # the reward asks, but held-out accuracy rose in 2 seeds of 3 with them and fell in the third
  c.warm_start.variants = 0
  c.warm_start.variant_episodes = 1  # oracle episodes per (variant, hinted or not)

  c.eval = ml_collections.ConfigDict()  # library settings never used for training (heldout.py)
  c.eval.every = 10
  c.eval.episodes_per_setting = 8
  c.eval.seed = 1234
  return c


def check_tiny_config(c) -> None:
  """Raises ValueError with one line per problem (the config errors a user can make)."""
  problems = []

  def need(ok, msg):
    if not ok:
      problems.append(msg)

  need(c.spade.reward in rewards.VARIANTS, f"spade.reward must be one of {rewards.VARIANTS}")
  p = tuple(c.spade.plateau)
  need(
    len(p) == 4 and 0 <= p[0] < p[1] <= p[2] < p[3] <= 1,
    "spade.plateau must be 4 win rates lo < top_lo <= top_hi < hi in [0, 1]",
  )
  need(c.steps > 0, "steps must be positive")
  need(
    c.model.attention_impl in ATTENTION_IMPLS,
    f"model.attention_impl must be one of {ATTENTION_IMPLS}",
  )
  for k in ("num_games", "plays", "regen_interval"):
    need(c.spade[k] > 0, f"spade.{k} must be positive")
  need(0 < c.spade.hint_plays <= c.spade.plays, "spade.hint_plays must be in [1, spade.plays]")
  need(c.agent.temperature > 0, "agent.temperature must be > 0 for policy-gradient training")
  need(c.agent.max_context > c.agent.prompt_len, "agent.max_context must exceed agent.prompt_len")
  need(
    c.agent.feed_chunk == 0 or c.agent.prompt_len % c.agent.feed_chunk == 0,
    "agent.prompt_len must be a multiple of agent.feed_chunk",
  )
  need(c.designer.prompt_len % 16 == 0, "designer.prompt_len must be a multiple of 16")
  need(c.designer.program_tokens >= 32, "designer.program_tokens must be >= 32")
  need(c.checkpoint_every > 0, "checkpoint_every must be positive")
  need(c.warm_start.steps >= 0, "warm_start.steps must be >= 0")
  need(c.warm_start.variants >= 0, "warm_start.variants must be >= 0")
  need(c.warm_start.variant_episodes >= 0, "warm_start.variant_episodes must be >= 0")
  need(c.designer.reference_plays >= 0, "designer.reference_plays must be >= 0")
  need(c.designer.library_hints in HINTS, f"designer.library_hints must be one of {HINTS}")
  need(c.designer.attempts > 0, "designer.attempts must be positive")
  need(c.designer.feasibility_seeds >= 0, "designer.feasibility_seeds must be >= 0")
  need(c.train.schedule in SCHEDULES, f"train.schedule must be one of {SCHEDULES}")
  need(c.train.kl_coef >= 0, "train.kl_coef must be >= 0")
  problems.extend(loss_problems(c.train))
  if problems:
    raise ValueError("; ".join(problems))


def load_run_config(path) -> ml_collections.ConfigDict:
  """The config of a tiny run from its ``config.json`` (a run's workdir or the file itself):
  `tiny_config` overridden by the saved values (lists back to tuples where the default is a
  tuple; keys a newer `tiny_config` added keep their defaults, keys it dropped are ignored)."""
  path = Path(path)
  path = path / "config.json" if path.is_dir() else path
  config = tiny_config()

  def assign(node, saved):
    for k, v in saved.items():
      if k not in node:
        continue
      if isinstance(v, dict):
        assign(node[k], v)
      else:
        node[k] = tuple(v) if isinstance(node[k], tuple) else v

  assign(config, json.loads(path.read_text()))
  return config


# ------------------------------------------------------------------------------- typed config
# The run reads its config through these frozen dataclasses (`typed_config`), one per section
# of `tiny_config`, field for field: a key added to `tiny_config` needs its field here (the
# conversion refuses a key without one, and a field without its key).


@dataclasses.dataclass(frozen=True)
class ModelSection:
  embed_dim: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  mlp_dim: int
  rope_theta: float
  tie_embeddings: bool
  attention_impl: str


@dataclasses.dataclass(frozen=True)
class SpadeSection:
  reward: str
  num_games: int
  plays: int
  hint_plays: int
  regen_interval: int
  memory: bool
  plateau: tuple[float, ...]
  reward_scale_cap: float
  active_skills: int


@dataclasses.dataclass(frozen=True)
class DesignerSection:
  program_tokens: int
  prompt_len: int
  feasibility_seeds: int
  attempts: int
  fallback: bool
  reference_plays: int
  library_hints: str


@dataclasses.dataclass(frozen=True)
class AgentSection:
  temperature: float
  top_p: float
  top_k: int
  max_turns: int
  max_new_tokens: int
  max_context: int
  prompt_len: int
  feed_chunk: int


@dataclasses.dataclass(frozen=True)
class TrainSection:
  learning_rate: float
  schedule: str
  min_lr_ratio: float
  warmup_steps: int
  b1: float
  b2: float
  weight_decay: float
  grad_clip_norm: float
  eps_low: float
  eps_high: float
  tis_cap: float
  aggregation: str
  norm_constant: int
  entropy_coef: float
  kl_coef: float
  kl_estimator: str
  logprob_chunk: int
  advantage: str


@dataclasses.dataclass(frozen=True)
class WarmStartSection:
  steps: int
  batch: int
  learning_rate: float
  max_level: int
  episodes_per_program: int
  variants: int
  variant_episodes: int


@dataclasses.dataclass(frozen=True)
class EvalSection:
  every: int
  episodes_per_setting: int
  seed: int


@dataclasses.dataclass(frozen=True)
class TinyRunConfig:
  """A tiny run's config, typed (`typed_config`); sections and fields as in `tiny_config`."""

  front_end: str
  seed: int
  steps: int
  checkpoint_every: int
  keep_checkpoints: int
  progress: bool
  plot_every: int
  compile_ahead: bool
  families: tuple[str, ...]
  records_per_step: int
  model: ModelSection
  spade: SpadeSection
  designer: DesignerSection
  agent: AgentSection
  train: TrainSection
  warm_start: WarmStartSection
  eval: EvalSection


def typed_config(config) -> TinyRunConfig:
  """``config`` (a `tiny_config` ConfigDict, as overridden) checked (`check_tiny_config`) and
  converted to a `TinyRunConfig` (a `TinyRunConfig` is returned as is). Raises ValueError on a
  value the run cannot use, a key without a field or a field without a key, or a value of the
  wrong type."""
  if isinstance(config, TinyRunConfig):
    return config
  check_tiny_config(config)
  return _section(TinyRunConfig, config, "")


def _section(cls, node, path: str):
  hints = typing.get_type_hints(cls)
  names = [f.name for f in dataclasses.fields(cls)]
  keys = list(node.keys())
  unknown = [k for k in keys if k not in hints]
  missing = [n for n in names if n not in keys]
  if unknown or missing:
    raise ValueError(
      f"tiny config section {path.rstrip('.') or '(top)'}: keys without a {cls.__name__} "
      f"field {unknown}, "
      f"fields without a key {missing} (spade_jax/tiny/config.py)"
    )
  return cls(**{n: _value(node[n], hints[n], f"{path}{n}") for n in names})


def _value(value, hint, path: str):
  if dataclasses.is_dataclass(hint):
    return _section(hint, value, path + ".")
  if typing.get_origin(hint) is tuple:
    item = typing.get_args(hint)[0]
    if not isinstance(value, tuple | list):
      raise ValueError(f"{path} must be a sequence, got {value!r}")
    return tuple(_value(v, item, f"{path}[{i}]") for i, v in enumerate(value))
  ok = {
    bool: isinstance(value, bool),
    int: isinstance(value, int) and not isinstance(value, bool),
    float: isinstance(value, int | float) and not isinstance(value, bool),
    str: isinstance(value, str),
  }[hint]
  if not ok:
    raise ValueError(f"{path} must be a {hint.__name__}, got {value!r}")
  return float(value) if hint is float else value
