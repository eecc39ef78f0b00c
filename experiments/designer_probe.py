r"""Runs the designer alone: what a config's policy writes and where its samples stop.

  python experiments/designer_probe.py --config experiments/configs/smollm2_cpu.py \
      --workdir /tmp/probe --rounds 2 [--config.designer.max_new_tokens=768 ...]

Builds the config's policy, corpus, memory (with library seeds when ``spade.library_seeds``) and
validator exactly as the training loop does, then runs ``--rounds`` regenerations of
``spade.num_games`` slots (``spade.max_attempts`` attempts each) with the initial weights: no
plays, no update. With ``--config.warm_start.steps=N`` the designer warm start
(`spade.warmstart`) runs first, as a run starts with it, and the rounds sample from the
warm-started weights (its record goes to ``<workdir>/warm_start.json``). Every attempt's source
and verdict go to ``<workdir>/envs`` as in a run; the summary (stage counts, passes,
translations, seeds shown, seconds) is printed and written to ``<workdir>/probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spade_jax import xla_cpu  # noqa: E402

xla_cpu.setup()

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "experiment config file[:arg]", lock_config=True)
flags.DEFINE_string("workdir", None, "output directory (envs/, probe.json)")
flags.DEFINE_integer("rounds", 1, "regenerations to run")


def main(argv) -> None:
  del argv
  from spade_jax import runner, sharding
  from spade_jax.engine.generate import Engine
  from spade_jax.envs.sandbox.pool import SandboxConfig
  from spade_jax.envs.sandbox.validate import ValidatorConfig
  from spade_jax.spade import config as spade_config
  from spade_jax.spade import corpus as corpus_lib
  from spade_jax.spade import skills
  from spade_jax.spade.designer import Designer
  from spade_jax.spade.library_seeds import seed_memory
  from spade_jax.spade.memory import EnvMemory

  config, workdir = FLAGS.config, Path(FLAGS.workdir)
  spade_config.check_config(config)
  s = config.spade
  corpus = None
  if s.corpus != "none":
    path = corpus_lib.DEFAULT_CORPUS if s.corpus == "default" else s.corpus
    corpus = corpus_lib.CorpusSampler(
      corpus_lib.load_corpus(path, s.corpus_words), seed=config.seed
    )
  mesh = sharding.make_mesh(tuple(config.mesh.shape))
  model, _, tok = runner.load_policy(config, mesh)
  sandbox = SandboxConfig(call_timeout=config.sandbox.call_timeout)
  validator = ValidatorConfig(
    seeds=tuple(range(config.sandbox.validation_seeds)),
    total_timeout=config.sandbox.validation_timeout,
    sandbox=sandbox,
  )
  params = None  # the engine's (initial) weights
  engine = Engine(model, mesh=mesh)
  designer = Designer(
    engine,
    tok,
    spade_config.designer_config(config),
    validator,
    workdir / "envs",
    translate_seeds=s.translate_seeds,
    max_context=config.designer.max_context,
  )
  if config.warm_start.steps > 0:
    documents = corpus.documents if corpus is not None else None
    params = warm_started(config, model, designer, mesh, workdir, documents)
  memory = EnvMemory() if s.memory else None
  if memory is not None and s.library_seeds:
    seed_memory(memory, designer.cfg.kind)
  schedule = skills.SkillSchedule(
    skills=spade_config.setting_skills(config.setting), active=s.active_skills
  )
  total: dict[str, float] = {}
  rows = []
  for r in range(FLAGS.rounds):
    t = time.perf_counter()
    names = list(skills.assign_skills(r, s.num_games, schedule))
    games, _, m = designer.design(
      gen_step=r, skills=names, memory=memory, corpus=corpus, seed=config.seed, params=params
    )
    m["seconds"] = time.perf_counter() - t
    m["translated"] = float(sum(g is not None and g.translated for g in games))
    rows.append(m)
    for k, v in m.items():
      if (
        k.startswith("designer/stage/")
        or k.startswith("designer/refusal/")
        or k
        in (
          "designer/passed",
          "designer/attempts",
          "translated",
          "seconds",
        )
      ):
        total[k] = total.get(k, 0.0) + v
    print(json.dumps({"round": r, **m}), flush=True)
  summary = {"rounds": rows, "total": total}
  (workdir / "probe.json").write_text(json.dumps(summary, indent=1))
  print(json.dumps({"total": total}, indent=1))


def warm_started(config, model, designer, mesh, workdir: Path, documents):
  """The policy's parameters after the config's designer warm start (its record written)."""
  from spade_jax.rl.optimizer import make_optimizer
  from spade_jax.rl.train_state import create_train_state
  from spade_jax.spade import config as spade_config
  from spade_jax.spade.warmstart import warm_start

  opt = make_optimizer(spade_config.optimizer_config(config))
  graphdef, state = create_train_state(model, opt, seed=config.seed, mesh=mesh)
  t = time.perf_counter()
  state, metrics, record = warm_start(graphdef, state, designer, config, mesh, documents)
  metrics["perf/warm_start_s"] = time.perf_counter() - t
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / "warm_start.json").write_text(json.dumps(dict(record, metrics=metrics), indent=1))
  print(json.dumps(metrics), flush=True)
  return state.params


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
