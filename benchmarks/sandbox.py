"""Sandbox benchmark: validation latency per env and sandboxed env steps/s, batched over workers.

  python benchmarks/sandbox.py [--repeats 3] [--envs 64] [--batches 50] [--workers 1 2]

Prints one JSON object (medians over repeats). It also records the load average, because the
numbers depend on what else the machine runs. The "interpreter" entry translates the same
environment (`spade_jax.envs.translate.pipeline`, differential check included) and times the jitted
interpreter on it (CPU here; on an accelerator the batch can be much larger).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from spade_jax.envs.sandbox.pool import SandboxConfig, SandboxPool
from spade_jax.envs.sandbox.validate import ValidatorConfig, validate

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "envs"
STEP_ENV = FIXTURES / "valid" / "v01_guess_number.py"


def validation_latency(repeats: int) -> dict:
  """Median seconds of a full validation (fresh worker each time) per fixture."""
  out = {}
  names = sorted(p for p in (FIXTURES / "valid").glob("*.py"))
  names += [FIXTURES / "invalid" / "i06_disallowed_import.py"]  # rejected statically
  names += [FIXTURES / "invalid" / "i17_infeasible_solution.py"]  # rejected in the sandbox
  for path in names:
    text = path.read_text()
    runs = []
    for _ in range(repeats):
      t = time.perf_counter()
      report = validate(text, ValidatorConfig())
      runs.append(time.perf_counter() - t)
    out[path.stem] = {"seconds": round(statistics.median(runs), 4), "stage": report.stage}
  return out


def worker_start(repeats: int) -> float:
  """Median seconds to start, lock down and handshake one worker (then kill it)."""
  runs = []
  for _ in range(repeats):
    pool = SandboxPool(1)
    t = time.perf_counter()
    pool.layers()
    runs.append(time.perf_counter() - t)
    pool.close()
  return round(statistics.median(runs), 4)


def steps_per_second(workers: int, n_envs: int, batches: int, repeats: int) -> float:
  """Env steps/s through `step_many` with `n_envs` instances spread over `workers` workers.

  Every step is a wrong guess (`\\boxed{0}`; targets are 1..100) and max_turns is huge, so the
  episodes never end and every timed call is a real step with feedback.
  """
  source = STEP_ENV.read_text()
  rates = []
  with SandboxPool(workers, SandboxConfig()) as pool:
    envs = pool.make_envs(source, n_envs, kwargs={"max_turns": 10**9})
    pool.reset_many(envs, list(range(n_envs)))
    actions = ["\\boxed{0}"] * n_envs
    for _ in range(repeats):
      t = time.perf_counter()
      for _ in range(batches):
        out = pool.step_many(envs, actions)
      rates.append(n_envs * batches / (time.perf_counter() - t))
      assert all(o[0] == "0 is too low." for o in out), out[:2]
  return round(statistics.median(rates), 1)


def unbatched_steps_per_second(steps: int, repeats: int) -> float:
  """Steps/s of one env through `SandboxedEnv.step` (one round trip per step)."""
  rates = []
  with SandboxPool(1) as pool:
    env = pool.make_env(STEP_ENV.read_text(), kwargs={"max_turns": 10**9})
    env.reset(0)
    for _ in range(repeats):
      t = time.perf_counter()
      for _ in range(steps):
        env.step("\\boxed{0}")
      rates.append(steps / (time.perf_counter() - t))
  return round(statistics.median(rates), 1)


def interpreter_comparison(batches: list[int], steps: int, repeats: int) -> dict:
  """The same environment (v01, max_turns=32) translated and run by the interpreter: env steps/s
  of a jitted loop of ``steps`` steps over a batch, every step a wrong guess (`\\boxed{0}`), as
  in the sandbox numbers. ``parsed_on_device``: the answer's token ids are parsed on device
  each step (what the rollout does); ``transition_only``: a pre-parsed answer. Compile time is
  excluded (reported separately)."""
  if importlib.util.find_spec("spade_jax.envs.translate.pipeline") is None:
    return {"available": False, "reason": "translator not available"}
  import jax
  import jax.numpy as jnp
  import numpy as np

  from spade_jax.envs.ir.interpreter import ProgramEnv
  from spade_jax.envs.ir.parse import make_parse_tables, parse_tokens
  from spade_jax.envs.ir.program import DEFAULT_CONFIG as cfg
  from spade_jax.envs.ir.program import make_action
  from spade_jax.envs.translate.pipeline import resolve_tokenizer, translate_and_check

  tok, tok_name = resolve_tokenizer(None)
  t = time.perf_counter()
  out = translate_and_check(
    STEP_ENV.read_text(), None, tokenizer=tok, seeds=16, kwargs={"max_turns": 32}
  )
  check_s = time.perf_counter() - t
  if not out["translated"]:
    return {"available": False, "reason": out["translation_reason"]}
  program, env = out["program"], ProgramEnv(cfg)
  tables = make_parse_tables(tok.token_bytes)
  answer = tok.encode("\\boxed{0}")
  ids = np.zeros(16, np.int32)
  ids[: len(answer)] = answer
  parsed = make_action([0], cfg)

  def play(keys, on_device: bool):
    _, state = jax.vmap(env.reset_env, in_axes=(0, None))(keys, program)

    def body(i, state):
      if on_device:
        one = parse_tokens(jnp.asarray(ids), len(answer), tables, cfg.list_len)
      else:
        one = jax.tree.map(jnp.asarray, parsed)
      action = jax.tree.map(lambda x: jnp.broadcast_to(x, (keys.shape[0], *x.shape)), one)
      return jax.vmap(env.transition, in_axes=(0, 0, 0, None))(keys, state, action, program)[1]

    state = jax.lax.fori_loop(0, steps, body, state)
    return state.time, state.fault

  result = {
    "available": True,
    "env": "v01_guess_number (translated, max_turns=32)",
    "tokenizer": tok_name,
    "translate_and_check_s": round(check_s, 3),
    "steps_per_call": steps,
  }
  for mode in ("parsed_on_device", "transition_only"):
    fn = jax.jit(functools.partial(play, on_device=mode == "parsed_on_device"))
    for b in batches:
      keys = jax.random.split(jax.random.key(0), b)
      t = time.perf_counter()
      turns, fault = jax.block_until_ready(fn(keys))
      result.setdefault("compile_s", {})[f"{mode}_batch={b}"] = round(time.perf_counter() - t, 3)
      assert int(np.min(turns)) == steps and not np.any(fault), (turns, fault)
      rates = []
      for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(keys))
        rates.append(b * steps / (time.perf_counter() - t))
      result.setdefault("steps_per_s", {})[f"{mode}_batch={b}"] = round(statistics.median(rates), 1)
  return result


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--envs", type=int, default=64)
  p.add_argument("--batches", type=int, default=50)
  p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
  p.add_argument("--interpreter-batches", type=int, nargs="+", default=[64, 1024])
  args = p.parse_args(argv)
  result = {
    "benchmark": "sandbox",
    "python": sys.version.split()[0],
    "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    "load_average_before": [round(x, 2) for x in os.getloadavg()],
    "worker_start_s": worker_start(max(5, args.repeats)),
    "validation_latency_s": validation_latency(args.repeats),
    "steps_per_s": {
      f"batched_workers={w}_envs={args.envs}": steps_per_second(
        w, args.envs, args.batches, args.repeats
      )
      for w in args.workers
    },
  }
  result["steps_per_s"]["unbatched_1_env"] = unbatched_steps_per_second(500, args.repeats)
  result["interpreter"] = interpreter_comparison(args.interpreter_batches, 31, args.repeats)
  if result["interpreter"].get("available"):
    best_sandbox = max(result["steps_per_s"].values())
    best_interp = max(result["interpreter"]["steps_per_s"].values())
    result["interpreter"]["speedup_vs_best_sandbox"] = round(best_interp / best_sandbox, 1)
  result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
  print(json.dumps(result, indent=2))


if __name__ == "__main__":
  main()
