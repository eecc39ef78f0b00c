r"""Offline evaluation of a run's checkpoint, a base model, or a scripted policy.

  python experiments/eval.py --workdir RUN [--step N] [--suites paper] [--k K] [--limit N]
  python experiments/eval.py --workdir OUT --model smollm2 --suites rg_hard --limit 2
  python experiments/eval.py --workdir OUT --policy ground_truth --suites bfcl_v4 --json

Policies: ``model`` (default) plays the run's checkpoint at ``--step`` (default: the latest;
the model, tokenizer, dtype and mesh come from ``RUN/config.json``), or ``--model PATH`` (an HF
directory, a .gguf file or ``smollm2``) as a baseline; ``ground_truth`` plays each suite's oracle
and ``none`` answers nothing: the harness's ceiling and floor, no model needed.

Episodes go to ``RUN/eval/<label>/<suite>.jsonl`` (label: the checkpoint's step, ``base`` for
``--model``, or the policy name), the numbers to ``summary.json`` there; a rerun skips what is
already written. Prints the markdown table (avg@k in percent ± standard error), or with
``--json`` one line per suite and category. Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

from spade_jax.eval import harness, registry, results
from spade_jax.eval.players import ModelPlayer, ScriptedPlayer
from spade_jax.eval.suite import Sampling, empty_policy
from spade_jax.runner import UserError


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="experiments/eval.py",
    description=__doc__.split("\n\n")[1],
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  p.add_argument("--workdir", required=True, help="the run (or an output directory)")
  p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
  p.add_argument(
    "--suites",
    default="paper",
    help=f"comma list of {', '.join(registry.SUITES)}, 'paper', or SUITE:CATEGORY",
  )
  p.add_argument("--k", type=int, default=1, help="samples per prompt (avg@k)")
  p.add_argument("--limit", type=int, default=None, help="first N prompts of each category")
  p.add_argument("--policy", choices=("model", "ground_truth", "none"), default="model")
  p.add_argument("--model", default=None, help="baseline model instead of the run's checkpoint")
  p.add_argument("--tokenizer", default=None, help="with --model: tokenizer path")
  p.add_argument("--label", default=None, help="output subdirectory of eval/ (overrides)")
  p.add_argument("--json", action="store_true", help="one JSON line per suite and category")
  p.add_argument("--batch", type=int, default=64, help="episodes decoded together")
  p.add_argument("--max_context", type=int, default=None, help="KV cache slots per episode")
  p.add_argument("--max_new_tokens", type=int, default=None, help="cap on tokens per turn")
  p.add_argument("--max_turns", type=int, default=None, help="cap on assistant turns")
  p.add_argument("--greedy", action="store_true", help="greedy decoding for every suite")
  p.add_argument("--temperature", type=float, default=None)
  p.add_argument("--top_p", type=float, default=None)
  p.add_argument("--top_k", type=int, default=None)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument(
    "--mesh",
    default=None,
    help="data,fsdp,tensor or data,fsdp,expert,tensor (default: the run's); fewer devices than "
    "present uses the first ones",
  )
  return p


def _sampling(args) -> Sampling | None:
  if args.greedy:
    return Sampling(greedy=True)
  if args.temperature is None and args.top_p is None and args.top_k is None:
    return None  # each suite's own
  d = Sampling()
  return Sampling(
    temperature=d.temperature if args.temperature is None else args.temperature,
    top_p=d.top_p if args.top_p is None else args.top_p,
    top_k=d.top_k if args.top_k is None else args.top_k,
  )


def _run_config(workdir: Path):
  import ml_collections

  path = workdir / "config.json"
  if not path.exists():
    raise UserError(f"{path} not found: not a run directory (give --model for a base model)")
  config = ml_collections.ConfigDict(json.loads(path.read_text()))
  if config.get("front_end", "python") != "python":
    raise UserError("this run uses the tiny front end: its evaluation is in-loop (tiny.heldout)")
  return config


def _mesh(args, config):
  import jax

  from spade_jax import sharding

  if args.mesh is None:
    return sharding.make_mesh(tuple(config.mesh.shape))
  try:
    shape = tuple(int(x) for x in args.mesh.split(","))
  except ValueError as e:
    raise UserError(
      f"--mesh {args.mesh!r}: expected integers data,fsdp,tensor or data,fsdp,expert,tensor"
    ) from e
  devices = jax.devices()
  if len(shape) in (3, 4) and all(x > 0 for x in shape):
    devices = devices[: math.prod(shape)]
  try:
    return sharding.make_mesh(shape, devices=devices)
  except ValueError as e:
    raise UserError(f"--mesh: {e}") from e


def load_model(args, workdir: Path):
  """``(engine, tok, params, label, max_context)`` of the model to evaluate."""
  from spade_jax.engine.generate import Engine
  from spade_jax.spade.config import base_config

  if args.model:
    config = base_config()
    config.model.path = args.model
    config.model.tokenizer = args.tokenizer or ""
    mesh = _mesh(args, config)
    from spade_jax.runner import load_policy

    model, _, tok = load_policy(config, mesh)
    return Engine(model, mesh=mesh), tok, None, "base", config.agent.max_context
  from spade_jax.checkpoint import Checkpointer, CheckpointError
  from spade_jax.rl.optimizer import make_optimizer
  from spade_jax.rl.train_state import create_train_state
  from spade_jax.runner import load_policy
  from spade_jax.spade.config import optimizer_config

  config = _run_config(workdir)
  mesh = _mesh(args, config)
  model, model_cfg, tok = load_policy(config, mesh)
  _, state = create_train_state(
    model,
    make_optimizer(optimizer_config(config)),
    seed=config.seed,
    with_reference=config.train.kl_coef > 0,
    mesh=mesh,
  )
  ckpt = Checkpointer(workdir / "checkpoints", model_config=model_cfg, async_save=False)
  try:
    state, _ = ckpt.restore(state, args.step)
    step = args.step if args.step is not None else ckpt.latest_step()
  except CheckpointError as e:
    raise UserError(f"checkpoint: {e}") from e
  finally:
    ckpt.close()
  engine = Engine(model, mesh=mesh)
  engine.params = None
  return engine, tok, state.params, str(step), config.agent.max_context


def _rows(summary: dict) -> list[dict]:
  out = []
  for suite, s in summary.items():
    cats = dict(s["categories"])
    if len(cats) > 1:
      cats["overall"] = {**s["overall"], "prompts": sum(v["prompts"] for v in cats.values())}
    for cat, v in cats.items():
      out.append(
        {
          "suite": suite,
          "category": cat,
          "accuracy": v["mean"],
          "se": v["se"],
          "prompts": v["prompts"],
          "k": s["k"],
          "metric": s.get("metric", "accuracy"),
          "errors": s["errors"],
        }
      )
  return out


def run(args) -> dict:
  workdir = Path(args.workdir)
  optional = (args.limit, args.max_turns, args.max_new_tokens, args.max_context)
  if min(args.k, args.batch, *(v for v in optional if v is not None)) < 1:
    raise UserError(
      "--k, --limit, --batch, --max_turns, --max_new_tokens and --max_context must be positive"
    )
  try:
    selection = registry.parse_selection(args.suites)
  except ValueError as e:
    raise UserError(str(e)) from e
  suites = []
  for n in selection:
    try:
      suites.append(registry.make_suite(n))
    except registry.SuiteUnavailable as e:
      raise UserError(str(e)) from e
  if args.policy == "model":
    engine, tok, params, label, max_context = load_model(args, workdir)
    player = ModelPlayer(
      engine,
      tok,
      max_context=args.max_context or max_context,
      params_fn=lambda: params,
      sampling=_sampling(args),
      batch=args.batch,
      seed=args.seed,
      max_new_tokens=args.max_new_tokens,
      max_turns=args.max_turns,
    )

    def player_for(suite):
      return player

  else:
    label = args.policy
    missing = [s.name for s in suites if args.policy == "ground_truth" and not _has_oracle(s)]
    if missing:
      raise UserError(f"no ground-truth policy for suite(s) {missing}")

    def player_for(suite):
      return ScriptedPlayer(suite.oracle if args.policy == "ground_truth" else _empty)

  out = workdir / "eval" / (args.label or label)
  log = (lambda s: None) if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
  try:
    return harness.evaluate(
      suites, player_for, out, k=args.k, limit=args.limit, categories=selection, log=log
    )
  except ValueError as e:  # an unknown category
    raise UserError(str(e)) from e


def _empty(prompt):
  return empty_policy


def _has_oracle(suite) -> bool:
  prompts = suite.prompts()
  return bool(prompts) and suite.oracle(prompts[0]) is not None


def main(argv: list[str] | None = None) -> int:
  args = parser().parse_args(argv)
  try:
    with contextlib.redirect_stdout(sys.stderr):  # stdout: only the results (generators print)
      summary = run(args)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.json:
    for row in _rows(summary):
      print(json.dumps(row))
  else:
    print(results.table(summary))
  return 0
