"""Sandbox benchmark: validation latency per env and sandboxed env steps/s, batched over workers.

  python benchmarks/sandbox.py [--repeats 3] [--envs 64] [--batches 50] [--workers 1 2]

Prints one JSON object (medians over repeats). It also records the load average, because the
numbers depend on what else the machine runs. The interpreter comparison needs the translator
(`spade_jax.envs.translate`); until that module exists the "interpreter" entry says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from spade_jax.envs.sandbox import SandboxConfig, SandboxPool
from spade_jax.envs.validate import ValidatorConfig, validate

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


def interpreter_comparison() -> dict:
  if importlib.util.find_spec("spade_jax.envs.translate") is None:
    return {"available": False, "reason": "translator not available"}
  return {"available": False, "reason": "translator present; interpreter timing not wired yet"}


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--envs", type=int, default=64)
  p.add_argument("--batches", type=int, default=50)
  p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
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
  result["interpreter"] = interpreter_comparison()
  result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
  print(json.dumps(result, indent=2))


if __name__ == "__main__":
  main()
