"""``train_tiny(config, workdir)``: the tiny on-device SPADE run (``experiments/configs/tiny.py``).

Per step the host prepares the designer prompts (skill rotation and memory seeds, the SPADE
loop's own `skills` and `EnvMemory`), transfers them explicitly, calls the jitted
`iteration.iterate` under ``jax.transfer_guard("disallow")`` and fetches its outputs once: that
fetch is the iteration's only host sync. The host then writes metrics, the environment records
(``workdir/envs/``: program text, verdict, win rates, regret once known) and updates the memory;
every ``eval.every`` steps it writes the held-out results episode by episode to
``workdir/eval/stepNNNNNN.jsonl`` (NNNNNN: updates the evaluated policy has had).
Checkpoints hold the train state and the pool carry (device) plus memory, records of the pool
and the step (host), so a killed run resumes exactly. The whole run lives on one device; a run
of several processes (`spade_jax.multihost`) computes the same on one device of each (`place`)
and process 0 alone writes the run's files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax
import numpy as np

from spade_jax import multihost, runner
from spade_jax.runner import UserError
from spade_jax.spade.memory import EnvMemory
from spade_jax.tiny import compile_ahead, iteration
from spade_jax.tiny.config import TinyRunConfig, tiny_config, typed_config
from spade_jax.tiny.heldout import TinyHeldout
from spade_jax.tiny.language import REASONS
from spade_jax.tiny.setup import TinySetup, place
from spade_jax.tiny.spec import SOURCES


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
      if multihost.is_writer() and path.exists():  # records_per_step may have left it out
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
    if g < setup.config.records_per_step and multihost.is_writer():
      (envs / file).write_text(json.dumps(d, indent=1))
    pool.append(
      dict(file=file, program=text, skill=names[g], step=step)
      if valid and "program_GT" in rec
      else None
    )
  host["pool"] = pool


def _eval_path(workdir: Path, updates: int) -> Path | None:
  """Per-episode held-out results of the policy after ``updates`` updates (the SPADE loop's
  ``eval/stepNNNNNN.jsonl`` naming); ``None`` (not written) on processes other than 0."""
  return workdir / "eval" / f"step{updates:06d}.jsonl" if multihost.is_writer() else None


def train_tiny(config, workdir) -> dict:
  """Runs (or resumes) the tiny SPADE experiment in ``workdir``; returns the last metrics."""
  try:
    typed = typed_config(config)
  except ValueError as e:
    raise UserError(str(e)) from e
  # config.json: the dict; fields added since a run started resume at tiny_config()'s defaults
  with runner.Run(config, workdir, ("envs", "plots", "eval"), defaults=tiny_config()) as run:
    return _train(typed, run)


def _train(config: TinyRunConfig, run: runner.Run) -> dict:
  workdir = run.workdir
  if config.compile_ahead:
    compile_ahead.cache_dir(workdir)  # set before the first compile; also serves a resume
  # the child compiles for one process's one device: useless to a run of several processes
  ahead_of_time = config.compile_ahead and jax.process_count() == 1
  setup = TinySetup(config)
  graphdef, state, carry = setup.init_state()
  memory = EnvMemory() if config.spade.memory else None
  host = {"pool": [], "memory": memory}
  run.open_checkpoints(setup.model_cfg)
  start, restored, saved = run.restore({"state": state, "carry": carry})
  state, carry = restored["state"], restored["carry"]
  if saved is not None:
    host["pool"] = saved["pool"]
    if memory is not None:
      host["memory"] = memory = EnvMemory.from_state(saved["memory"])
  run.open_metrics()
  ahead = None
  try:
    if start == 0 and config.warm_start.steps > 0:
      from spade_jax.tiny.warmstart import warm_start

      if ahead_of_time:  # the big programs compile in a child meanwhile
        ahead = compile_ahead.AheadOfTime(workdir)
      t = time.perf_counter()
      state, warm = warm_start(graphdef, state, setup)
      warm["perf/warm_start_s"] = time.perf_counter() - t
      if ahead is not None:
        report = ahead.wait()
        warm["perf/compile_ahead_wait_s"] = time.perf_counter() - t - warm["perf/warm_start_s"]
        warm["perf/compile_ahead_ok"] = report["ok"]
      if multihost.is_writer():
        (workdir / "warm_start.json").write_text(json.dumps(warm, indent=1))
  finally:
    if ahead is not None:
      ahead.kill()
  state, carry = place((state, carry))
  heldout = TinyHeldout(
    graphdef, state.params, setup.tok, setup.framing, setup.library, config, spec=setup.rollout_spec
  )
  run.open_progress(("agent/solve_rate", "designer/valid_rate", "eval/accuracy"))
  W = config.spade.regen_interval
  last = {}
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
    out = multihost.to_host(out)  # the iteration's one host sync
    row.update(_scalars(out))
    dt = time.perf_counter() - t0
    row["perf/step_s"] = dt
    row["perf/env_steps_per_s"] = row.get("perf/env_steps", 0.0) / dt
    row["perf/compilations"] = float(sum(iteration.TRACES.values()))
    if regen:
      _write_records(setup, workdir, step, out, host)
    if config.eval.every and run.is_final(step):  # the final row: after the last update
      row.update(heldout.evaluate(state.params, _eval_path(workdir, step + 1)))
    run.end_step(
      step,
      row,
      {"state": state, "carry": carry},
      lambda: {"pool": host["pool"], "memory": None if memory is None else memory.to_state()},
    )
    last = row
  run.finish()
  return last
