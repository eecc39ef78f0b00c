"""Tiny on-device SPADE: the repository's default job.

  python experiments/run.py --config experiments/configs/tiny.py --workdir runs/tiny
  python experiments/run.py --config experiments/configs/tiny.py:smoke --workdir /tmp/tiny
  python experiments/run.py --config experiments/configs/tiny.py:reward=blend --workdir ...
  python experiments/run.py --config experiments/configs/tiny.py:reward=fixed,seed=1 ...

A ~0.6M-parameter Qwen3-architecture model trained from scratch writes environments in the
designer language (`spade_jax.tiny.language`) under a grammar mask and plays them, hinted and
unhinted, in one jitted iteration per step (`spade_jax.tiny.iteration`). `:smoke` is the test
size; `:reward=` selects the designer reward (the ablations of spade_jax.tiny.analysis.ablation);
`:seed=` the run seed; `:warm=0` starts from random weights (no supervised warm start).
"""

from spade_jax.spade.config import parse_config_arg
from spade_jax.spade.rewards import VARIANTS
from spade_jax.tiny.config import tiny_config


def get_config(arg: str = ""):
  args = parse_config_arg(
    arg,
    {
      "smoke": ("1",),
      "reward": VARIANTS,
      "seed": None,
      "warm": ("0", "1"),
    },
  )
  c = tiny_config()
  c.spade.reward = args.get("reward", "blend")
  c.seed = int(args.get("seed", 0))
  if args.get("warm") == "0":
    c.warm_start.steps = 0
  if "smoke" in args:
    c.steps = 3
    c.checkpoint_every = 1
    c.spade.num_games = 4
    c.spade.plays = 4
    c.spade.hint_plays = 2
    c.spade.regen_interval = 2
    c.model.num_layers = 2
    c.warm_start.steps = min(c.warm_start.steps, 4)
    # a 4-step warm start writes near-random programs, which are never feasible: without the
    # check the smoke run still trains the designer (feasibility: tests/test_tiny_language.py)
    c.designer.feasibility_seeds = 0
    c.warm_start.batch = 8
    c.warm_start.episodes_per_program = 2
    c.warm_start.variants = 2
    c.warm_start.variant_episodes = 1
    c.eval.every = 2
    c.eval.episodes_per_setting = 1
    c.progress = False
    c.plot_every = 0
    # a 4-step warm start leaves nothing to overlap (tests/test_tiny_compile_ahead.py turns it on)
    c.compile_ahead = False
  return c
