"""``train(config, workdir)``: the SPADE training run (importable from notebooks).

Builds the mesh, the policy (one model graph for sampling and training), the sandbox, the
designer / agent sides and the GRPO update, then runs ``config.steps`` iterations with
metrics, checkpoints (device + host state, every ``checkpoint_every`` steps), held-out
evaluation and plots. Calling it again on the same workdir resumes from the last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np

from spade_jax import metrics, multihost, runner, sharding
from spade_jax.runner import UserError
from spade_jax.spade import config as spade_config
from spade_jax.spade.config import base_config


def check_config(config) -> None:
  """Raises ValueError on a config this loop cannot run (the tiny front end's configs run in
  `spade_jax.tiny.train.train_tiny`; `experiments/run.py` picks the loop)."""
  front_end = config.get("front_end", "python")
  if front_end != "python":
    raise ValueError(
      f"front_end={front_end!r}: spade_jax.train runs the Python-environment loop only "
      "(the tiny front end: spade_jax.tiny.train.train_tiny, or experiments/run.py)"
    )
  spade_config.check_config(config)
  from spade_jax.eval import registry

  registry.parse_names(config.eval.suites)  # ValueError on an unknown suite


def _eval_suites(config) -> list:
  """The in-loop evaluation's suites (config ``eval``); none when it never runs."""
  from spade_jax.eval import registry

  if not (config.eval.every or config.eval.at_end):
    return []
  out = []
  for name in registry.parse_names(config.eval.suites):
    if name == "rg":
      tasks = tuple(t for t in config.eval.tasks.split(",") if t)
      if not tasks:
        continue
      kw = dict(tasks=tasks, items_per_task=config.eval.items_per_task, seed=config.eval.seed)
      out.append(registry.make_suite(name, max_new_tokens=config.eval.max_new_tokens, **kw))
    else:
      try:
        out.append(registry.make_suite(name))
      except registry.SuiteUnavailable as e:
        raise UserError(str(e)) from e
  return out


def _eval_metrics(summary: dict) -> dict[str, float]:
  """Metrics of an in-loop evaluation: ``eval/<suite>/<category>`` for every suite, and for
  the ``rg`` suite also the names the plots know (``eval/accuracy`` over all its items,
  ``eval/<bucket>``)."""
  from spade_jax.eval.harness import flat_metrics

  row = flat_metrics(summary)
  rg = summary.get("rg")
  if rg:
    cats = rg["categories"].values()
    row["eval/accuracy"] = sum(v["mean"] * v["prompts"] for v in cats) / max(
      1, sum(v["prompts"] for v in cats)
    )
    row.update({f"eval/{c}": v["mean"] for c, v in rg["categories"].items()})
  return row


def train(config, workdir) -> dict:
  """Runs (or resumes) the experiment in ``workdir``; returns the last logged metrics."""
  try:
    check_config(config)
  except ValueError as e:
    raise UserError(str(e)) from e
  subdirs = ("envs", "plots", "eval", "transcripts")
  with runner.Run(config, workdir, subdirs, defaults=base_config()) as run:
    return _train(config, run)


def _train(config, run: runner.Run) -> dict:
  from spade_jax.engine.generate import Engine
  from spade_jax.envs.sandbox.pool import SandboxConfig, SandboxPool
  from spade_jax.envs.sandbox.validate import ValidatorConfig
  from spade_jax.eval import harness
  from spade_jax.eval.players import ModelPlayer
  from spade_jax.rl.optimizer import make_optimizer
  from spade_jax.rl.train_state import create_train_state
  from spade_jax.rl.update import make_update
  from spade_jax.rollout.chat import ChatFraming
  from spade_jax.spade import corpus as corpus_lib
  from spade_jax.spade import prompts, rewards, skills
  from spade_jax.spade.agent import AgentPlayer, rollout_config
  from spade_jax.spade.designer import Designer
  from spade_jax.spade.library_seeds import seed_memory
  from spade_jax.spade.loop import LoopConfig, SpadeLoop
  from spade_jax.spade.memory import EnvMemory

  workdir = run.workdir
  s = config.spade
  corpus = None
  if s.corpus != "none":
    path = corpus_lib.DEFAULT_CORPUS if s.corpus == "default" else s.corpus
    try:
      corpus = corpus_lib.CorpusSampler(
        corpus_lib.load_corpus(path, s.corpus_words), seed=config.seed
      )
    except corpus_lib.CorpusError as e:
      raise UserError(f"corpus: {e}") from e
  mesh = sharding.make_mesh(tuple(config.mesh.shape))
  model, model_cfg, tok = runner.load_policy(config, mesh)
  engine = Engine(model, mesh=mesh)
  loss_cfg = spade_config.loss_config(config)
  opt_cfg = spade_config.optimizer_config(config)
  graphdef, state = create_train_state(
    model,
    make_optimizer(opt_cfg),
    seed=config.seed,
    with_reference=config.train.kl_coef > 0,
    mesh=mesh,
  )
  engine.params = None  # sampling always reads the train state's parameters (one graph)
  update = make_update(
    graphdef,
    loss_cfg,
    opt_cfg,
    mesh=mesh,
    state=state,
    **spade_config.micro_batching(config),
  )

  sandbox_cfg = SandboxConfig(
    call_timeout=config.sandbox.call_timeout, load_timeout=config.sandbox.load_timeout
  )
  pool = SandboxPool(num_workers=config.sandbox.workers, config=sandbox_cfg)
  run.on_close(pool.close)
  validator = ValidatorConfig(
    seeds=tuple(range(config.sandbox.validation_seeds)),
    total_timeout=config.sandbox.validation_timeout,
    sandbox=sandbox_cfg,
  )
  designer = Designer(
    engine,
    tok,
    spade_config.designer_config(config),
    validator,
    workdir / "envs",
    translate_seeds=config.spade.translate_seeds,
    max_context=config.designer.max_context,
  )
  device, framing = None, None
  if config.setting == "tool_use":  # tool environments run on the host, in the sandbox pool
    from spade_jax.rollout.tool_chat import ToolChatFraming
    from spade_jax.spade.tool_prompts import TOOL_AGENT_SYSTEM

    framing = ToolChatFraming.from_tokenizer(tok, system=TOOL_AGENT_SYSTEM)
  elif config.agent.device_rollout:
    from spade_jax.rollout.device import DeviceRollout

    device = DeviceRollout(
      model,
      tok,
      ChatFraming.from_tokenizer(tok, system=prompts.AGENT_SYSTEM),
      dataclasses.replace(rollout_config(config.agent), max_context=config.agent.device_context),
      prompt_len=config.agent.device_prompt_len,
    )
  player = AgentPlayer(
    engine,
    tok,
    rollout_config(config.agent),
    pool,
    s.plays,
    s.hint_plays,
    device=device,
    advantage=config.train.advantage,
    dynamic_sampling=config.train.dynamic_sampling,
    dynamic_rounds=config.train.dynamic_sampling_rounds,
    framing=framing,
    wave=config.agent.wave_size,
  )
  reward_cfg = rewards.DesignerRewardConfig(variant=s.reward, scale_cap=s.reward_scale_cap)
  memory = EnvMemory() if s.memory else None
  if memory is not None and s.get("library_seeds", False):
    seed_memory(memory, "tool" if config.setting == "tool_use" else "game")
  loop = SpadeLoop(
    LoopConfig(
      seed=config.seed,
      num_games=s.num_games,
      regen_interval=s.regen_interval,
      delay=s.delay or s.regen_interval,
      plays=s.plays,
      hint_plays=s.hint_plays,
      global_batch=config.train.global_batch,
      seq_len=config.train.seq_len,
      reward=reward_cfg,
      schedule=skills.SkillSchedule(
        skills=spade_config.setting_skills(config.setting), active=s.active_skills
      ),
    ),
    designer,
    player,
    update,
    memory,
    corpus,
  )

  run.open_checkpoints(model_cfg)
  start, state, host = run.restore(state)
  if host is not None:
    loop.load_host_state(host["loop"])
  warm: dict = {}
  if start == 0 and config.warm_start.steps > 0:
    documents = corpus.documents if corpus is not None else None
    state, warm = _warm_start(graphdef, state, designer, config, mesh, workdir, documents)

  eval_suites = _eval_suites(config)
  eval_player = ModelPlayer(
    engine,
    tok,
    max_context=config.eval.max_context or config.agent.max_context,
    params_fn=lambda: state.params,
    max_new_tokens=config.eval.max_new_tokens,
    max_turns=config.eval.max_turns or None,
    seed=config.seed,
  )

  run.open_metrics(wandb_project=config.wandb_project or None)
  run.open_progress(("agent/solve_rate", "designer/regret_mean", "train/loss"))
  last: dict = {}
  params_n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
  for step in range(start, config.steps):
    t0 = time.perf_counter()
    final = run.is_final(step)
    state, device_m, host_m, transcripts = loop.step(step, state, final=final)
    row = dict(host_m)
    if step == start:
      row.update(warm)  # the warm start's metrics (if it ran) in the first row
    row.update(metrics.to_host(device_m))
    dt = time.perf_counter() - t0
    row["perf/step_s"] = dt
    tokens = row.get("train/batch_loss_tokens", 0.0)
    row["perf/tokens_per_s"] = tokens / dt
    row["perf/train_flops_per_step"] = 6.0 * params_n * tokens
    if eval_suites and (
      (config.eval.every and (step + 1) % config.eval.every == 0) or (final and config.eval.at_end)
    ):
      t = time.perf_counter()
      summary = harness.evaluate(
        eval_suites,
        lambda suite: eval_player,
        workdir / "eval" / str(step + 1),
        k=config.eval.k,
        limit=config.eval.limit or None,
      )
      row.update(_eval_metrics(summary))
      row["perf/eval_s"] = time.perf_counter() - t
    _write_transcripts(
      workdir / "transcripts" / f"step{step:06d}.jsonl", transcripts, config.transcripts_per_step
    )
    run.end_step(step, row, state, lambda: {"loop": loop.host_state()})
    last = row
  run.finish()
  return last


def _warm_start(graphdef, state, designer, config, mesh, workdir: Path, documents):
  """The supervised designer warm start (`spade.warmstart`): ``(state, metrics)``; what trained
  and the per-step NLL go to ``warm_start.json``."""
  from spade_jax.spade.warmstart import WarmStartError, warm_start

  t = time.perf_counter()
  try:
    state, warm, record = warm_start(graphdef, state, designer, config, mesh, documents)
  except WarmStartError as e:
    raise UserError(str(e)) from e
  warm["perf/warm_start_s"] = time.perf_counter() - t
  if multihost.is_writer():
    (workdir / "warm_start.json").write_text(json.dumps(dict(record, metrics=warm), indent=1))
  return state, warm


def _write_transcripts(path: Path, transcripts: list, limit: int) -> None:
  if limit <= 0 or not transcripts or not multihost.is_writer():
    return
  with path.open("w") as f:
    for t in transcripts[:limit]:
      f.write(json.dumps(t) + "\n")


__all__ = ["UserError", "base_config", "check_config", "train"]
