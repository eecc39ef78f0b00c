"""Qwen3 (0.6B / 1.7B / 4B / 8B / 30B-A3B) with the paper's hyperparameters, for TPU / GPU.

  python experiments/run.py --config experiments/configs/qwen3.py:4b \
      --config.model.path=/local/hf/Qwen3-4B --workdir gs://bucket/runs/qwen3_4b
  python experiments/run.py --config experiments/configs/qwen3.py:size=8b,reward=blend ...
  python -m spade_jax.plan --config experiments/configs/qwen3.py:30b_a3b --mesh fsdp=8

`model.path` is a local HF directory (config.json + safetensors); with a network a hub id such
as Qwen/Qwen3-4B also works. Defaults follow SPADE_METHOD.md: 24 games per regeneration
every 4 steps, 8 unhinted + 8 hinted plays, global batch 192, Adam lr 1e-6, betas (0.9, 0.98),
weight decay 0.1, PPO clip (0.2, 0.28), TIS cap 2, KL 0 (0.005 for 8B), temperature 0.6,
top-p 0.95, top-k 20, designer 16k tokens, agent 8k tokens per turn, 25 turns, 32k context.
As in the reference's launch scripts (cmd/games/train_spade_{4b,8b,30b}.sh): 8B writes
environments of up to 20000 tokens with KL 0.005; 30B-A3B (Qwen/Qwen3-30B-A3B, a
mixture-of-experts model; the reference trains its Instruct-2507 variant) has KL 0.

The size is a bare word (`qwen3.py:8b`) or `size=8b`. Without a network `model.path` must be a
local directory; `python -m spade_jax.plan` needs neither (the sizes are architecture presets,
`spade_jax.models.presets`). Memory plans of these sizes: BUILD_NOTES.md, "Compiled memory plans".
"""

from spade_jax.spade.config import base_config, parse_config_arg
from spade_jax.spade.rewards import VARIANTS

SIZES = {
  "0.6b": "Qwen/Qwen3-0.6B",
  "1.7b": "Qwen/Qwen3-1.7B",
  "4b": "Qwen/Qwen3-4B",
  "8b": "Qwen/Qwen3-8B",
  "30b_a3b": "Qwen/Qwen3-30B-A3B",
}


def size_arg(arg: str, sizes) -> str:
  """``"8b,reward=x"`` -> ``"size=8b,reward=x"``: a bare size word names the size."""
  return ",".join(f"size={p.strip()}" if p.strip() in sizes else p for p in arg.split(","))


def get_config(arg: str = "size=4b"):
  args = parse_config_arg(size_arg(arg, SIZES), {"size": tuple(SIZES), "reward": VARIANTS})
  size = args.get("size", "4b")
  c = base_config()
  c.model.path = SIZES[size]
  c.model.dtype = "bfloat16"
  c.model.remat = "full"
  c.spade.reward = args.get("reward", "regret")
  c.steps = 200
  c.train.kl_coef = 0.005 if size == "8b" else 0.0
  if size == "8b":
    c.designer.max_new_tokens = 20000
  c.train.micro_batches = 8
  # 384 episodes at once do not fit any target; 32 per wave fit 4B and 8B on 8xH100 and on a
  # TPU v5p-8 (README, "Memory plans")
  c.agent.wave_size = 32
  # the designer's 24 prompts x 32k slots at once: 72.3 GiB on 8xH100 for 4B, 82.4 for 8B
  c.designer.wave_size = 8
  c.mesh.shape = (1, -1, 1)
  c.sandbox.workers = 16
  c.eval.every = 20
  return c
