"""The experiment config schema (ml_collections) with SPADE_METHOD.md defaults, and its checks.

Experiment files in ``experiments/configs/`` start from :func:`base_config` and override
fields; ``check_config`` turns every inconsistent value into one clear ``ValueError``.
"""

from __future__ import annotations

import ml_collections

from spade_jax.models.config import ATTENTION_IMPLS
from spade_jax.rl import advantages, losses
from spade_jax.spade.heldout import DEFAULT_TASKS, TASK_BUCKET
from spade_jax.spade.rewards import VARIANTS
from spade_jax.spade.skills import GAMES_SKILLS, TOOL_SKILLS
from spade_jax.spade.tool_prompts import DIFFICULTIES

SETTINGS = ("games", "tool_use")


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.steps = 8
  # "games": cognitive games answered in \boxed{} (skills.GAMES_SKILLS, library game twins);
  # "tool_use": ToolEnv environments played by a tool-calling agent on the host (skills.TOOL_SKILLS,
  # the tool library, rollout.tool_chat framing, tool_prompts)
  c.setting = "games"

  c.model = ml_collections.ConfigDict()
  c.model.path = "smollm2"  # HF dir, .gguf file, "smollm2", or a hub id (with a network)
  c.model.tokenizer = ""  # default: model.path
  c.model.dtype = "float32"  # compute dtype; master weights are always float32
  c.model.remat = "none"
  # training / prefill attention: reference (einsum + softmax), xla or cudnn
  # (jax.nn.dot_product_attention), auto (cuDNN on a GPU where it applies, else XLA)
  c.model.attention_impl = "reference"

  c.mesh = ml_collections.ConfigDict()
  # data, fsdp, tensor (or data, fsdp, expert, tensor: expert parallelism for MoE models);
  # -1 fills from the device count
  c.mesh.shape = (1, -1, 1)

  c.spade = ml_collections.ConfigDict()
  c.spade.num_games = 24
  c.spade.regen_interval = 4
  c.spade.delay = 0  # 0: one regen interval
  c.spade.active_skills = 3
  c.spade.plays = 8  # unhinted plays per game per step
  # hinted plays per game at the pool's first step: hinted play h uses unhinted play h's seed
  # (matched instances) while h < plays, fresh seeds beyond
  c.spade.hint_plays = 8
  c.spade.max_attempts = 5
  c.spade.reward = "regret"
  c.spade.reward_scale_cap = 50.0
  c.spade.memory = True
  # bootstrap the memory with the setting's library environments (game twins / tool library) as
  # seeds marked "library", so the first designer prompts carry worked examples; the reference
  # starts from an empty memory (off)
  c.spade.library_seeds = False
  c.spade.corpus = "default"  # "default" (shipped), "none", or a JSONL path
  c.spade.corpus_words = 6000
  c.spade.translate_seeds = 64  # seeds of the differential check before a translation is used

  c.designer = ml_collections.ConfigDict()
  c.designer.temperature = 0.6
  c.designer.top_p = 0.95
  c.designer.top_k = 20
  c.designer.max_new_tokens = 16384
  c.designer.hint_temperature = 0.3
  c.designer.hint_max_new_tokens = 128
  c.designer.max_context = 32768
  # forced opening of every designer reply (DesignerConfig.reply_prefix): generic, the same for
  # every skill; "" = none (the reference)
  c.designer.reply_prefix = ""
  # tool_use: the difficulty of game g's prompt cycles through this list, and this fraction of
  # the prompts asks for a multi-instruction (BFCL multi-turn style) environment
  c.designer.tool_difficulties = "easy,medium,hard"
  c.designer.multi_instruction = 0.5
  # prompts sampled at once (designer and hint generation in waves of this many); 0: all
  c.designer.wave_size = 0

  c.agent = ml_collections.ConfigDict()
  c.agent.temperature = 0.6
  c.agent.top_p = 0.95
  c.agent.top_k = 20
  c.agent.max_turns = 25
  c.agent.max_new_tokens = 8192
  c.agent.max_context = 32768
  # Translated games play on device (rollout.device.DeviceRollout); its cache and first-prompt
  # slots are static sizes, smaller than the host loop's max_context (an episode that runs out
  # of slots ends truncated, reason "context").
  c.agent.device_rollout = True
  c.agent.device_context = 4096
  c.agent.device_prompt_len = 1024
  # episodes sampled at once (host and device rollouts each play in waves of this size), what
  # bounds the sampler's cache memory (`python -m spade_jax.plan`); 0: every episode at once
  c.agent.wave_size = 0

  c.sandbox = ml_collections.ConfigDict()
  c.sandbox.workers = 4
  c.sandbox.call_timeout = 30.0
  c.sandbox.load_timeout = 30.0
  c.sandbox.validation_timeout = 60.0
  c.sandbox.validation_seeds = 8

  c.train = ml_collections.ConfigDict()
  c.train.global_batch = 192
  c.train.seq_len = 0  # 0: power-of-two bucket of the longest sample
  c.train.micro_batches = 1
  # at most this many token slots (rows x length) per micro-batch of a segment (0: no bound);
  # the designer's long rows then train a few at a time (rl.update.segment_micro_batches)
  c.train.micro_tokens = 0
  c.train.learning_rate = 1e-6
  c.train.b1 = 0.9
  c.train.b2 = 0.98
  c.train.weight_decay = 0.1
  c.train.grad_clip_norm = 1.0
  c.train.moments_dtype = "float32"  # Adam's moments; "bfloat16" halves them (30B-A3B)
  c.train.eps_low = 0.2
  c.train.eps_high = 0.28
  c.train.tis_cap = 2.0
  c.train.kl_coef = 0.0
  c.train.aggregation = "seq_mean_token_mean"
  c.train.norm_constant = 0  # constant_norm's per-sample token budget (0: the batch's length)
  c.train.entropy_coef = 0.0  # entropy bonus coefficient (0: none)
  c.train.kl_estimator = "k3"  # KL-to-reference estimator k1 / k2 / k3 (used when kl_coef > 0)
  c.train.logprob_chunk = 256  # positions per chunk of the chunked log-softmax (memory knob)
  # MoE models: coefficient of the router's load-balancing loss in the update (0: none, as the
  # reference recipe's --moe-aux-loss-coeff 0; transformers trains with 0.001 only when asked
  # for output_router_logits). Dense models ignore it.
  c.train.router_aux_coef = 0.0
  # the agent's advantages (rl.advantages): zscore (GRPO) or center (Dr.GRPO, no std division)
  c.train.advantage = "zscore"
  # DAPO dynamic sampling: drop the agent's groups whose returns all agree (advantage 0) and
  # refill the batch from further rounds of plays of the pool (fresh seeds), at most
  # `dynamic_sampling_rounds` rounds per step, the first included (spade.agent.AgentPlayer)
  c.train.dynamic_sampling = False
  c.train.dynamic_sampling_rounds = 3

  # supervised designer warm start before the first iteration (`spade.warmstart`): the library
  # environments and their difficulty variants written from the run's first designer prompts;
  # 0 steps: off (the reference has none). Runs only when a run starts, not when it resumes.
  c.warm_start = ml_collections.ConfigDict()
  c.warm_start.steps = 0
  c.warm_start.batch = 4  # designer rows per supervised step
  c.warm_start.learning_rate = 1e-5  # constant, its own AdamW (the loop's starts fresh after)
  c.warm_start.variants = 2  # difficulty variants per library environment (validated)

  c.eval = ml_collections.ConfigDict()
  c.eval.every = 0  # 0: only at the end
  c.eval.at_end = True
  # suites run in-loop (spade_jax.eval.registry; "paper" = rg_hard,bfcl_v4,heldout_games,
  # heldout_tools); the same code as experiments/eval.py, written to <workdir>/eval/<step>/
  c.eval.suites = "rg"
  c.eval.k = 1  # samples per prompt (avg@k)
  c.eval.limit = 0  # first N prompts of each category of each suite (0: all)
  c.eval.max_new_tokens = 512  # cap on sampled tokens per turn, every suite
  c.eval.max_turns = 0  # cap on assistant turns per episode (0: each suite's own)
  c.eval.max_context = 0  # KV cache slots per episode (0: agent.max_context)
  # the "rg" suite: Reasoning-Gym tasks at default difficulty, greedy, \boxed{} answers
  c.eval.tasks = ",".join(DEFAULT_TASKS)
  c.eval.items_per_task = 8
  c.eval.seed = 1234

  c.checkpoint_every = 1
  c.keep_checkpoints = 3
  c.plot_every = 0  # 0: only at the end
  c.transcripts_per_step = 4
  c.progress = True
  c.wandb_project = ""
  return c


def check_config(c: ml_collections.ConfigDict) -> None:
  """Raises ValueError with a one-line message on any inconsistent value."""

  def need(cond, msg):
    if not cond:
      raise ValueError(msg)

  s = c.spade
  need(c.steps > 0, f"steps must be positive, got {c.steps}")
  need(s.num_games > 0, f"spade.num_games must be positive, got {s.num_games}")
  need(s.regen_interval > 0, f"spade.regen_interval must be positive, got {s.regen_interval}")
  delay = s.delay or s.regen_interval
  need(
    delay % s.regen_interval == 0,
    f"spade.delay={s.delay} must be a positive multiple of regen_interval={s.regen_interval}",
  )
  need(s.plays > 0, f"spade.plays must be positive, got {s.plays}")
  need(s.hint_plays >= 0, f"spade.hint_plays must be >= 0, got {s.hint_plays}")
  need(c.setting in SETTINGS, f"setting={c.setting!r}; expected one of {', '.join(SETTINGS)}")
  need(
    1 <= s.active_skills <= len(setting_skills(c.setting)),
    f"spade.active_skills must lie in [1, {len(setting_skills(c.setting))}], got {s.active_skills}",
  )
  bad = [d for d in tool_difficulties(c) if d not in DIFFICULTIES]
  need(
    not bad and tool_difficulties(c),
    f"designer.tool_difficulties={c.designer.tool_difficulties!r}; expected a comma-separated "
    f"list of {', '.join(DIFFICULTIES)}",
  )
  need(
    0.0 <= c.designer.multi_instruction <= 1.0,
    f"designer.multi_instruction must be in [0, 1], got {c.designer.multi_instruction}",
  )
  need(
    s.memory or not s.library_seeds,
    "spade.library_seeds needs spade.memory (the seeds live in the environment memory)",
  )
  w = c.warm_start
  need(w.steps >= 0, f"warm_start.steps must be >= 0, got {w.steps}")
  need(w.batch > 0, f"warm_start.batch must be positive, got {w.batch}")
  need(w.learning_rate > 0, f"warm_start.learning_rate must be positive, got {w.learning_rate}")
  need(w.variants >= 0, f"warm_start.variants must be >= 0, got {w.variants}")
  need(s.max_attempts > 0, f"spade.max_attempts must be positive, got {s.max_attempts}")
  need(s.reward in VARIANTS, f"spade.reward={s.reward!r}; expected one of {', '.join(VARIANTS)}")
  need(
    c.model.dtype in ("float32", "bfloat16"),
    f"model.dtype={c.model.dtype!r}; expected float32 or bfloat16",
  )
  need(
    c.model.attention_impl in ATTENTION_IMPLS,
    f"model.attention_impl={c.model.attention_impl!r}; expected one of {', '.join(ATTENTION_IMPLS)}",
  )
  need(
    c.agent.temperature == c.designer.temperature,
    "agent.temperature and designer.temperature must be equal: the trainer recomputes "
    "log-probs at one sampling temperature",
  )
  need(c.agent.temperature > 0, "agent.temperature must be > 0 for policy-gradient training")
  for role in ("agent", "designer"):
    r = c[role]
    need(0 < r.top_p <= 1, f"{role}.top_p must be in (0, 1], got {r.top_p}")
    need(r.top_k >= 0, f"{role}.top_k must be >= 0, got {r.top_k}")
    need(r.max_new_tokens > 0, f"{role}.max_new_tokens must be positive")
    need(r.max_context > r.max_new_tokens, f"{role}.max_context must exceed {role}.max_new_tokens")
  need(c.agent.max_turns > 0, "agent.max_turns must be positive")
  if c.agent.device_rollout:
    need(
      c.agent.device_context > c.agent.device_prompt_len >= 64,
      "agent.device_context must exceed agent.device_prompt_len (>= 64)",
    )
    need(
      c.agent.device_prompt_len <= 512 or c.agent.device_prompt_len % 512 == 0,
      "agent.device_prompt_len above 512 must be a multiple of 512",
    )
  need(c.train.global_batch > 0, "train.global_batch must be positive")
  for problem in loss_problems(c.train):
    need(False, problem)
  need(
    c.train.dynamic_sampling_rounds >= 1,
    f"train.dynamic_sampling_rounds must be >= 1, got {c.train.dynamic_sampling_rounds}",
  )
  need(
    c.train.global_batch % c.train.micro_batches == 0,
    "train.global_batch must be divisible by train.micro_batches",
  )
  need(
    c.train.get("micro_tokens", 0) >= 0,
    f"train.micro_tokens must be >= 0 (0: no bound), got {c.train.get('micro_tokens', 0)}",
  )
  need(c.sandbox.workers > 0, "sandbox.workers must be positive")
  tasks = [t for t in c.eval.tasks.split(",") if t]
  unknown = [t for t in tasks if t not in TASK_BUCKET]
  need(not unknown, f"eval.tasks has unknown task(s) {unknown}; known: {sorted(TASK_BUCKET)}")
  need(c.eval.k >= 1, f"eval.k must be >= 1, got {c.eval.k}")
  need(c.eval.limit >= 0, f"eval.limit must be >= 0, got {c.eval.limit}")
  need(c.eval.max_turns >= 0, f"eval.max_turns must be >= 0, got {c.eval.max_turns}")
  need(c.eval.max_context >= 0, f"eval.max_context must be >= 0, got {c.eval.max_context}")
  need(
    len(c.mesh.shape) in (3, 4),
    "mesh.shape must have 3 entries (data, fsdp, tensor) or 4 (data, fsdp, expert, tensor), "
    f"got {tuple(c.mesh.shape)}",
  )


def setting_skills(setting: str) -> tuple[str, ...]:
  """The skills a setting's pools rotate through."""
  return TOOL_SKILLS if setting == "tool_use" else GAMES_SKILLS


def tool_difficulties(c) -> list[str]:
  """`designer.tool_difficulties` as a list."""
  return [d.strip() for d in c.designer.tool_difficulties.split(",") if d.strip()]


def loss_problems(train) -> list[str]:
  """One line per invalid loss or advantage key of a ``train`` section."""
  out = []
  if train.advantage not in advantages.MODES:
    out.append(f"train.advantage={train.advantage!r}; expected one of {advantages.MODES}")
  if train.kl_estimator not in losses.KL_ESTIMATORS:
    out.append(f"train.kl_estimator={train.kl_estimator!r}; expected one of {losses.KL_ESTIMATORS}")
  if train.aggregation not in losses.AGGREGATIONS:
    out.append(f"train.aggregation={train.aggregation!r}; expected one of {losses.AGGREGATIONS}")
  if train.norm_constant < 0:
    out.append(f"train.norm_constant must be >= 0 (0: the batch length), got {train.norm_constant}")
  if train.logprob_chunk < 1:
    out.append(f"train.logprob_chunk must be >= 1, got {train.logprob_chunk}")
  if train.get("router_aux_coef", 0.0) < 0:
    out.append(f"train.router_aux_coef must be >= 0, got {train.router_aux_coef}")
  return out


def designer_config(c):
  """The designer's settings of a Python-environment config (`spade.designer.DesignerConfig`)."""
  from spade_jax.spade.designer import DesignerConfig

  s = c.spade
  return DesignerConfig(
    num_games=s.num_games,
    max_attempts=s.max_attempts,
    temperature=c.designer.temperature,
    top_p=c.designer.top_p,
    top_k=c.designer.top_k,
    max_new_tokens=c.designer.max_new_tokens,
    hint_temperature=c.designer.hint_temperature,
    hint_max_new_tokens=c.designer.hint_max_new_tokens,
    use_memory=s.memory,
    setting=c.setting,
    tool_difficulties=tuple(tool_difficulties(c)),
    multi_instruction=c.designer.multi_instruction,
    wave_size=c.designer.wave_size,
    reply_prefix=c.designer.reply_prefix,
  )


def loss_config(c) -> losses.LossConfig:
  """The policy loss of a config (base or tiny): its ``train`` keys, sampled at the agent's
  temperature (the trainer recomputes log-probs at the sampling temperature)."""
  t = c.train
  return losses.LossConfig(
    eps_low=t.eps_low,
    eps_high=t.eps_high,
    tis_cap=t.tis_cap or None,
    kl_coef=t.kl_coef,
    kl_estimator=t.kl_estimator,
    entropy_coef=t.entropy_coef,
    aggregation=t.aggregation,
    norm_constant=t.norm_constant or None,
    temperature=c.agent.temperature,
    logprob_chunk=t.logprob_chunk,
    router_aux_coef=getattr(t, "router_aux_coef", 0.0),  # the tiny front end has none
  )


def parse_config_arg(arg: str, allowed: dict[str, tuple[str, ...] | None]) -> dict[str, str]:
  """Parses a config-file argument ``"key=value,key2=value2"`` (a bare word ``smoke`` means
  ``smoke=1``); ``allowed`` maps each key to its allowed values (None: any)."""
  out: dict[str, str] = {}
  for part in (p for p in arg.split(",") if p):
    key, _, value = part.partition("=")
    key, value = key.strip(), value.strip() or "1"
    if key not in allowed:
      raise ValueError(f"unknown config argument {key!r}; expected one of {sorted(allowed)}")
    choices = allowed[key]
    if choices is not None and value not in choices:
      raise ValueError(f"config argument {key}={value!r}; expected one of {list(choices)}")
    out[key] = value
  return out


def micro_batching(c) -> dict:
  """The update's micro-batching keywords of a config (`rl.update.make_update`)."""
  return dict(micro_batches=c.train.micro_batches, micro_tokens=c.train.get("micro_tokens", 0))


def optimizer_config(c):
  """The AdamW settings of a config's ``train`` section."""
  from spade_jax.rl.optimizer import OptimizerConfig

  return OptimizerConfig(
    learning_rate=c.train.learning_rate,
    b1=c.train.b1,
    b2=c.train.b2,
    weight_decay=c.train.weight_decay,
    grad_clip_norm=c.train.grad_clip_norm or None,
    moments_dtype=c.train.moments_dtype,
  )
