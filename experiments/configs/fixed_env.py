"""Actor-only baseline: GRPO on the fixed library seed pool, no designer training.

  python experiments/run.py --config experiments/configs/fixed_env.py:model=smollm2_cpu \
      --workdir runs/fixed_smollm2

`model` picks the base experiment whose model and budgets are reused (smollm2_cpu, qwen3,
llama, tool_use: the tool-use setting's Qwen3-4B recipe, or its SmolLM2 budgets with `smoke`);
the reward variant is forced to `fixed`, so the agent trains on the setting's library pool.
"""

import importlib.util
import os

from spade_jax.spade.config import parse_config_arg


def _load(name):
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"spade_config_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def get_config(arg: str = "model=smollm2_cpu"):
  args = parse_config_arg(
    arg, {"model": ("smollm2_cpu", "qwen3", "llama", "tool_use"), "smoke": ("1",)}
  )
  base = _load(args.get("model", "smollm2_cpu"))
  c = base.get_config("smoke" if "smoke" in args else "")
  c.spade.reward = "fixed"
  return c
