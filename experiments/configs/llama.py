"""Llama-architecture checkpoints with default RoPE (e.g. SmolLM2-360M / 1.7B-Instruct).

  python experiments/run.py --config experiments/configs/llama.py:size=1.7b \
      --config.model.path=/local/hf/SmolLM2-1.7B-Instruct --workdir runs/llama_1.7b

Checkpoints whose RoPE uses a scaling scheme (Llama 3.1+ "llama3" scaling) are refused with a
clear error rather than silently mis-modelled.
"""

from spade_jax.spade.config import base_config, parse_config_arg
from spade_jax.spade.rewards import VARIANTS

SIZES = {
  "135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
  "360m": "HuggingFaceTB/SmolLM2-360M-Instruct",
  "1.7b": "HuggingFaceTB/SmolLM2-1.7B-Instruct",
}


def get_config(arg: str = "size=1.7b"):
  args = parse_config_arg(arg, {"size": tuple(SIZES), "reward": VARIANTS})
  c = base_config()
  c.model.path = SIZES[args.get("size", "1.7b")]
  c.model.dtype = "bfloat16"
  c.spade.reward = args.get("reward", "regret")
  c.steps = 200
  c.designer.max_new_tokens = 4096
  c.designer.max_context = 8192
  c.agent.max_new_tokens = 1024
  c.agent.max_context = 8192
  c.agent.max_turns = 10
  c.eval.every = 20
  return c
