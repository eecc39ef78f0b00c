"""``train_tiny(config, workdir)``: the tiny on-device SPADE run (``experiments/configs/tiny.py``).

Per step the host prepares the designer prompts (skill rotation and memory seeds, the SPADE
loop's own `skills` and `EnvMemory`), transfers them explicitly, calls the jitted
`iteration.iterate` under ``jax.transfer_guard("disallow")`` and fetches its outputs once: that
fetch is the iteration's only host sync. The host then writes metrics, the environment records
(``workdir/envs/``: program text, verdict, win rates, regret once known) and updates the memory;
every ``eval.every`` steps it writes the held-out results episode by episode to
``workdir/eval/stepNNNNNN.jsonl`` (NNNNNN: updates the evaluated policy has had).
Checkpoints hold the train state and the pool carry (device) plus memory, records of the pool
and the step (host), so a killed run resumes exactly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from spade_jax import checkpoint, metrics
from spade_jax.envs.ir.parse import make_parse_tables
from spade_jax.envs.ir.program import stack_programs
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer
from spade_jax.rl.train_state import abstract_state, create_train_state
from spade_jax.rollout.chat import ChatFraming
from spade_jax.rollout.types import RolloutSpec
from spade_jax.spade import plots, rewards, skills
from spade_jax.spade.config import loss_config
from spade_jax.spade.memory import EnvMemory
from spade_jax.spade.skills import NUM_SKILLS
from spade_jax.tiny import compile_ahead, iteration
from spade_jax.tiny.config import check_tiny_config
from spade_jax.tiny.heldout import LibraryPrograms, TinyHeldout, training_settings
from spade_jax.tiny.iteration import SOURCES
from spade_jax.tiny.language import REASONS, TINY_CONFIG, Language
from spade_jax.tiny.tokenizer import load_tiny_tokenizer

DESIGNER_INSTRUCTION = "Design a game. Skill: {skill}."


def model_config(config, vocab_size: int) -> TransformerConfig:
  m = config.model
  return TransformerConfig(
    vocab_size=vocab_size,
    embed_dim=m.embed_dim,
    num_layers=m.num_layers,
    num_heads=m.num_heads,
    num_kv_heads=m.num_kv_heads,
    head_dim=m.head_dim,
    mlp_dim=m.mlp_dim,
    rope_theta=m.rope_theta,
    qk_norm=True,
    tie_embeddings=m.tie_embeddings,
    max_position=4096,
    model_type="qwen3",
  )


class TinySetup:
  """Everything a tiny run builds from its config (also used by the benchmark and tests)."""

  def __init__(self, config):
    self.config = c = config
    self.tok = load_tiny_tokenizer()
    self.lang = Language.make(self.tok, TINY_CONFIG, max_tokens=c.designer.program_tokens)
    self.framing = ChatFraming.from_tokenizer(self.tok)
    self.rollout_spec = RolloutSpec.make(
      self.tok,
      self.framing,
      max_context=c.agent.max_context,
      program_cfg=self.lang.cfg,
      prompt_len=c.agent.prompt_len,
      feed_chunk=c.agent.feed_chunk,
    )
    self.model_cfg = model_config(c, self.tok.vocab_size)
    self.opt_cfg = OptimizerConfig(
      learning_rate=c.train.learning_rate,
      schedule=c.train.schedule,
      decay_steps=c.steps if c.train.schedule != "constant" else 0,
      min_lr_ratio=c.train.min_lr_ratio,
      warmup_steps=c.train.warmup_steps,
      b1=c.train.b1,
      b2=c.train.b2,
      weight_decay=c.train.weight_decay,
      grad_clip_norm=c.train.grad_clip_norm or None,
    )
    s = c.spade
    reward = rewards.DesignerRewardConfig(
      variant=s.reward, scale_cap=s.reward_scale_cap, plateau=tuple(s.plateau)
    )
    self.spec = iteration.TinySpec(
      lang=self.lang,
      rollout=self.rollout_spec,
      num_games=s.num_games,
      plays=s.plays,
      hint_plays=s.hint_plays,
      regen_interval=s.regen_interval,
      prompt_len=c.designer.prompt_len,
      reward=reward,
      loss=loss_config(c),
      opt=self.opt_cfg,
      temperature=c.agent.temperature,
      top_p=c.agent.top_p,
      top_k=c.agent.top_k,
      agent_turns=c.agent.max_turns,
      agent_new_tokens=c.agent.max_new_tokens,
      feasibility_seeds=c.designer.feasibility_seeds,
      attempts=c.designer.attempts,
      fallback=c.designer.fallback,
      reference_plays=c.designer.reference_plays,
      advantage=c.train.advantage,
      reward_scale=rewards.reward_scale(
        s.num_games * s.plays, s.num_games, s.regen_interval, s.reward_scale_cap
      ),
    )
    self.library = LibraryPrograms.build(
      self.lang, self.tok, c.designer.library_hints, only=tuple(c.families)
    )
    self.train_families, self.heldout_families = self.library.split()
    fams = [f for f in self.train_families]
    from spade_jax.envs.library import FAMILIES

    names = []
    for f in fams:
      if FAMILIES[f].skill not in names:
        names.append(FAMILIES[f].skill)
    self.skill_schedule = skills.SkillSchedule(
      skills=tuple(names), active=min(s.active_skills, len(names))
    )
    self.parse = make_parse_tables(self.tok.token_bytes)

  def init_state(self):
    model = Transformer(self.model_cfg, rngs=nnx.Rngs(self.config.seed))
    graphdef, state = create_train_state(
      model,
      make_optimizer(self.opt_cfg),
      seed=self.config.seed,
      # the warm start then replaces it with the warm-started policy
      with_reference=self.config.train.kl_coef > 0 or self.config.designer.reference_plays > 0,
    )
    first = self.library.by_family[self.train_families[0]]
    carry = iteration.init_carry(self.spec, first[min(first)], NUM_SKILLS)
    return graphdef, state, carry

  # ----------------------------------------------------------------------- per-step inputs
  def skills_of(self, step: int) -> tuple[str, ...]:
    epoch = step // self.config.spade.regen_interval
    return skills.assign_skills(epoch, self.config.spade.num_games, self.skill_schedule)

  def designer_prompt(self, skill: str, seed_tokens=None) -> list[int]:
    """Chat-framed designer prompt: the instruction with the skill, then (if it fits) one
    high-regret program of the same skill from memory, as designer tokens."""
    fr = self.framing
    content = self.tok.encode(DESIGNER_INSTRUCTION.format(skill=skill))
    ids = list(fr.first_prefix) + content + list(fr.first_suffix)
    if seed_tokens and len(ids) + len(seed_tokens) <= self.config.designer.prompt_len:
      ids = list(fr.first_prefix) + content + list(seed_tokens) + list(fr.first_suffix)
    if len(ids) > self.config.designer.prompt_len:
      raise ValueError(f"designer prompt of {len(ids)} tokens > designer.prompt_len")
    return ids

  def inputs(self, step: int, memory: EnvMemory | None) -> iteration.StepInputs:
    c, G, Tp = self.config, self.config.spade.num_games, self.config.designer.prompt_len
    names = self.skills_of(step)
    prompts = np.zeros((G, Tp), np.int32)
    valid = np.zeros((G, Tp), bool)
    for g, skill in enumerate(names):
      seed_tokens = None
      if memory is not None:
        positives, _ = memory.select(skill, seed=(c.seed, step, g))
        if positives:
          seed_tokens = self.lang.encode(positives[0].source)
      ids = self.designer_prompt(skill, seed_tokens)
      prompts[g, Tp - len(ids) :], valid[g, Tp - len(ids) :] = ids, True
    return iteration.StepInputs(
      step=np.int32(step),
      seed=np.int32(c.seed),
      prompts_GP=prompts,
      prompt_valid_GP=valid,
      skill_G=np.asarray(skills.skill_ids(names), np.int32),
      fixed_programs=self.fixed_pool(step),
      parse=self.parse,
    )

  def fixed_pool(self, step: int):
    """The ``fixed`` baseline's pool: the library's training settings (those the warm start
    uses), a random draw per regeneration seeded by (seed, epoch); also fills the (ignored)
    slot of the other variants."""
    c = self.config
    rng = np.random.default_rng([c.seed, step // c.spade.regen_interval, 77])
    settings = training_settings(self.library, c.warm_start.max_level)
    picks = rng.integers(len(settings), size=c.spade.num_games)
    return stack_programs([self.library.by_family[n][lv] for n, lv in (settings[i] for i in picks)])


def _scalars(out: dict) -> dict:
  """The scalar metrics of one step's outputs; NaN marks "no value this step" (e.g. the
  difficulty of a pool without designer games) and is left out."""
  return {k: float(v) for k, v in out.items() if "/" in k and np.ndim(v) == 0 and np.isfinite(v)}


def _write_records(setup: TinySetup, workdir: Path, step: int, out: dict, host: dict) -> None:
  """Environment records of the pool generated at ``step`` (and the previous pool's rewards)."""
  envs = workdir / "envs"
  names = setup.skills_of(step)
  rec = out.get("records", {})
  prev = out.get("prev")
  if prev is not None:  # the previous pool's delayed designer rewards are now known
    for g, entry in enumerate(host.get("pool", [])):
      if entry is None or not prev["trained_G"][g]:
        continue
      path = envs / entry["file"]
      d = json.loads(path.read_text())
      d.update(
        regret=float(prev["regret_G"][g]),
        win_rate=float(prev["win_rate_G"][g]),
        designer_reward=float(prev["reward_G"][g]),
        trained_at_step=step,
      )
      path.write_text(json.dumps(d, indent=1))
      if host.get("memory") is not None:
        host["memory"].add(
          source=entry["program"],
          skill=entry["skill"],
          win_rate=float(prev["win_rate_G"][g]),
          regret=float(prev["regret_G"][g]),
          step=entry["step"],
        )
  pool = []
  for g in range(setup.config.spade.num_games):
    if "program_GT" in rec:
      toks = [int(t) for t in rec["program_GT"][g] if t != 0]
      try:
        text = setup.lang.decode(toks)
      except ValueError as e:
        text = f"# undecodable: {e}"
      reason = REASONS[int(rec["reason_G"][g])]
    else:
      text, reason = "# fixed pool (library program)", "ok"
    valid = bool(rec["valid_G"][g])
    d = dict(
      step=step,
      game=g,
      skill=names[g],
      valid=valid,
      reason=reason,
      program=text,
      win_rate_offset0=float(rec["win_G"][g]),
      hint_win_rate=float(rec["hint_win_G"][g]),
      source=SOURCES[int(rec["source_G"][g])] if "source_G" in rec else "library",
      difficulty_bits=float(rec["bits_G"][g]),
    )
    file = f"step{step:06d}_game{g:02d}.json"
    if g < setup.config.records_per_step:
      (envs / file).write_text(json.dumps(d, indent=1))
    pool.append(
      dict(file=file, program=text, skill=names[g], step=step)
      if valid and "program_GT" in rec
      else None
    )
  host["pool"] = pool


def place(tree):
  """``tree`` committed to the run's one device. A tiny run places its state and carry this way
  once, fresh or resumed, and every step's inputs: restored arrays are committed, fresh ones
  (and some of the warm start's) are not, and jit keys its executables on that, so mixed
  placements compile extra executables and make a resumed run miss the persistent compilation
  cache. Committed inputs also give the jitted iteration the cache key of one lowered ahead of
  time from `ShapeDtypeStruct`s with these shardings (benchmarks/tiny_cache_key.py)."""
  return jax.device_put(tree, jax.devices()[0])


def _eval_path(workdir: Path, updates: int) -> Path:
  """Per-episode held-out results of the policy after ``updates`` updates (the SPADE loop's
  ``eval/stepNNNNNN.jsonl`` naming)."""
  return workdir / "eval" / f"step{updates:06d}.jsonl"


def train_tiny(config, workdir) -> dict:
  """Runs (or resumes) the tiny SPADE experiment in ``workdir``; returns the last metrics."""
  from spade_jax.train import UserError, _check_resume_config, _config_json, _truncate_metrics

  try:
    check_tiny_config(config)
  except ValueError as e:
    raise UserError(str(e)) from e
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  _check_resume_config(workdir, config)
  for sub in ("envs", "plots", "eval"):
    (workdir / sub).mkdir(exist_ok=True)
  if config.compile_ahead:
    compile_ahead.cache_dir(workdir)  # set before the first compile; also serves a resume
  setup = TinySetup(config)
  graphdef, state, carry = setup.init_state()
  memory = EnvMemory() if config.spade.memory else None
  host = {"pool": [], "memory": memory}
  ckpt = checkpoint.Checkpointer(
    workdir / "checkpoints", max_to_keep=config.keep_checkpoints, model_config=setup.model_cfg
  )
  start, last = 0, {}
  latest = ckpt.latest_step()
  if latest is not None:
    try:
      restored, saved = ckpt.restore(abstract_state({"state": state, "carry": carry}), latest)
    except checkpoint.CheckpointError as e:
      raise UserError(f"checkpoint: {e}") from e
    state, carry = restored["state"], restored["carry"]
    start = int(saved["next_step"])
    host["pool"] = saved["pool"]
    if memory is not None:
      host["memory"] = memory = EnvMemory.from_state(saved["memory"])
  _truncate_metrics(workdir / "metrics.jsonl", start)
  writer = metrics.MetricsWriter(workdir, wandb_config=_config_json(config))
  ahead = None
  try:
    if start == 0 and config.warm_start.steps > 0:
      from spade_jax.tiny.warmstart import warm_start

      if config.compile_ahead:  # the big programs compile in a child meanwhile
        ahead = compile_ahead.AheadOfTime(workdir)
      t = time.perf_counter()
      state, warm = warm_start(graphdef, state, setup)
      warm["perf/warm_start_s"] = time.perf_counter() - t
      if ahead is not None:
        report = ahead.wait()
        warm["perf/compile_ahead_wait_s"] = time.perf_counter() - t - warm["perf/warm_start_s"]
        warm["perf/compile_ahead_ok"] = report["ok"]
      (workdir / "warm_start.json").write_text(json.dumps(warm, indent=1))
  finally:
    if ahead is not None:
      ahead.kill()
  state, carry = place((state, carry))
  heldout = TinyHeldout(
    graphdef, state.params, setup.tok, setup.framing, setup.library, config, spec=setup.rollout_spec
  )
  bar = metrics.ProgressBar(
    config.steps,
    initial=start,
    enabled=config.progress,
    keys=("agent/solve_rate", "designer/valid_rate", "eval/accuracy"),
  )
  W = config.spade.regen_interval
  try:
    for step in range(start, config.steps):
      t0 = time.perf_counter()
      regen = step % W == 0
      row = {}
      if config.eval.every and step % config.eval.every == 0:  # before this step's update
        t = time.perf_counter()
        row.update(heldout.evaluate(state.params, _eval_path(workdir, step)))
        row["perf/eval_s"] = time.perf_counter() - t
      inputs = place(setup.inputs(step, memory))  # committed, like state and carry
      with jax.transfer_guard("disallow"):
        state, carry, out = iteration.iterate(
          graphdef, state, carry, inputs, spec=setup.spec, regen=regen
        )
      out = jax.device_get(out)  # the iteration's one host sync
      row.update(_scalars(out))
      dt = time.perf_counter() - t0
      row["perf/step_s"] = dt
      row["perf/env_steps_per_s"] = row.get("perf/env_steps", 0.0) / dt
      row["perf/compilations"] = float(sum(iteration.TRACES.values()))
      if regen:
        _write_records(setup, workdir, step, out, host)
      final = step == config.steps - 1
      if config.eval.every and final:  # the final row: after the last update
        row.update(heldout.evaluate(state.params, _eval_path(workdir, step + 1)))
      writer.write(step, row)
      if (step + 1) % config.checkpoint_every == 0 or final:
        ckpt.save(
          step + 1,
          {"state": state, "carry": carry},
          {
            "next_step": step + 1,
            "pool": host["pool"],
            "memory": None if memory is None else memory.to_state(),
          },
        )
      if final or (config.plot_every and (step + 1) % config.plot_every == 0):
        writer.flush()
        plots.write_plots(metrics.read_metrics(workdir / "metrics.jsonl"), workdir / "plots")
      bar.update(1, row)
      last = row
  finally:
    bar.close()
    writer.close()
    ckpt.wait_until_finished()
    ckpt.close()
  if start >= config.steps:
    plots.write_plots(metrics.read_metrics(workdir / "metrics.jsonl"), workdir / "plots")
  return last
