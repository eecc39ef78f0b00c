"""Qwen3 (0.6B / 1.7B / 4B / 8B) with the paper's hyperparameters, for TPU / GPU.

  python experiments/run.py --config experiments/configs/qwen3.py:size=4b \
      --config.model.path=/local/hf/Qwen3-4B --workdir gs://bucket/runs/qwen3_4b
  python experiments/run.py --config experiments/configs/qwen3.py:size=8b,reward=blend ...

`model.path` is a local HF directory (config.json + safetensors); with a network a hub id such
as Qwen/Qwen3-4B also works. Defaults follow SPADE_METHOD.md: 24 games per regeneration
every 4 steps, 8 unhinted + 8 hinted plays, global batch 192, Adam lr 1e-6, betas (0.9, 0.98),
weight decay 0.1, PPO clip (0.2, 0.28), TIS cap 2, KL 0 (0.005 for 8B), temperature 0.6,
top-p 0.95, top-k 20, designer 16k tokens, agent 8k tokens per turn, 25 turns, 32k context.
"""

from spade_jax.spade.config import base_config, parse_config_arg
from spade_jax.spade.rewards import VARIANTS

SIZES = {
  "0.6b": "Qwen/Qwen3-0.6B",
  "1.7b": "Qwen/Qwen3-1.7B",
  "4b": "Qwen/Qwen3-4B",
  "8b": "Qwen/Qwen3-8B",
}


def get_config(arg: str = "size=4b"):
  args = parse_config_arg(arg, {"size": tuple(SIZES), "reward": VARIANTS})
  size = args.get("size", "4b")
  c = base_config()
  c.model.path = SIZES[size]
  c.model.dtype = "bfloat16"
  c.model.remat = "full"
  c.spade.reward = args.get("reward", "regret")
  c.steps = 200
  c.train.kl_coef = 0.005 if size == "8b" else 0.0
  c.train.micro_batches = 8
  c.mesh.shape = (1, -1, 1)
  c.sandbox.workers = 16
  c.eval.every = 20
  return c
