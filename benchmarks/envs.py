"""Interpreter env-steps/s (vmapped, batch 1024, random answers) vs the Python twins stepped
in a plain loop, measured side by side in one run. Prints one JSON object.

  python benchmarks/envs.py [--batch 1024] [--tokenizer smollm2] [--repeats 5]

Both sides step a mix of every library family (all difficulty levels) with random answers
(random ints, sometimes no answer) and start a new episode when one ends. The interpreter
uses gymnax's auto-resetting ``step`` (``step_calls``: one jitted call per batch step) and a
jitted ``lax.scan`` of ``--scan`` steps (``scan``: no host dispatch between steps, as inside
an on-device rollout); ``scan_transition_no_reset`` scans `ProgramEnv.transition` (what the
rollout calls: no reset computed per step; finished episodes stay finished). The Python side calls ``twin.step(text)``; ``python+encode`` also
tokenises each observation, which a host rollout loop must do. Medians over ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.envs.ir.interpreter import ProgramEnv
from spade_jax.envs.ir.program import DEFAULT_CONFIG, Action, stack_programs
from spade_jax.envs.library import FAMILIES
from spade_jax.tokenizer import load_tokenizer


def _mix(batch: int):
  combos = [(f, lv) for f in FAMILIES.values() for lv in f.levels]
  return [combos[i % len(combos)] for i in range(batch)]


def _random_actions(key, batch: int):
  k1, k2 = jax.random.split(key)
  vals = jax.random.randint(k1, (batch, DEFAULT_CONFIG.list_len), -100, 101)
  found = jax.random.uniform(k2, (batch,)) < 0.9
  return Action(found, jnp.where(found, 1, 0).astype(jnp.int32), vals.astype(jnp.int32))


def bench_interpreter(programs, batch: int, scan_len: int, repeats: int) -> dict:
  env = ProgramEnv(DEFAULT_CONFIG)
  keys = jax.random.split(jax.random.key(0), batch)
  _, state = jax.jit(jax.vmap(env.reset))(keys, programs)
  step = jax.jit(jax.vmap(env.step))

  def many(state, key, fn):
    def body(st, k):
      ka, ks = jax.random.split(k)
      obs, st, r, te, tr, _ = jax.vmap(fn)(
        jax.random.split(ks, batch), st, _random_actions(ka, batch), programs
      )
      return st, jnp.sum(r) + jnp.sum(obs.length)

    return jax.lax.scan(body, state, jax.random.split(key, scan_len))

  scan = jax.jit(lambda st, k: many(st, k, env.step))
  scan_transition = jax.jit(lambda st, k: many(st, k, env.transition))
  actions = [_random_actions(jax.random.key(i), batch) for i in range(8)]
  t0 = time.perf_counter()
  out = step(keys, state, actions[0], programs)
  jax.block_until_ready(out)
  compile_step = time.perf_counter() - t0
  t0 = time.perf_counter()
  jax.block_until_ready(scan(state, jax.random.key(1)))
  compile_scan = time.perf_counter() - t0
  jax.block_until_ready(scan_transition(state, jax.random.key(1)))
  per_call, per_scan, per_transition = [], [], []
  for r in range(repeats):
    st = state
    t0 = time.perf_counter()
    for a in actions:
      _, st, *_ = step(keys, st, a, programs)
    jax.block_until_ready(st)
    per_call.append(batch * len(actions) / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    jax.block_until_ready(scan(state, jax.random.key(r)))
    per_scan.append(batch * scan_len / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    jax.block_until_ready(scan_transition(state, jax.random.key(r)))
    per_transition.append(batch * scan_len / (time.perf_counter() - t0))
  return dict(
    step_calls_steps_per_s=float(np.median(per_call)),
    scan_steps_per_s=float(np.median(per_scan)),
    scan_transition_no_reset_steps_per_s=float(np.median(per_transition)),
    compile_s=dict(step=round(compile_step, 2), scan=round(compile_scan, 2)),
  )


def bench_python(mix, steps: int, repeats: int, tokenizer=None) -> float:
  rng = random.Random(0)
  twins = [f.twin(**lv) for f, lv in mix]
  for i, t in enumerate(twins):
    t.reset(i)
  texts = [
    f"\\boxed{{{rng.randint(-100, 100)}}}" if rng.random() < 0.9 else "no idea" for _ in range(997)
  ]
  rates = []
  for _ in range(repeats):
    n = 0
    t0 = time.perf_counter()
    while n < steps:
      for t in twins:
        obs, r, te, tr, _ = t.step(texts[n % 997])
        if tokenizer is not None:
          tokenizer.encode(obs)
        if te or tr:
          t.reset(n)
        n += 1
    rates.append(n / (time.perf_counter() - t0))
  return float(np.median(rates))


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--batch", type=int, default=1024)
  ap.add_argument("--scan", type=int, default=16)
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--python-steps", type=int, default=20480)
  ap.add_argument("--tokenizer", default="smollm2")
  args = ap.parse_args()
  tok = load_tokenizer(args.tokenizer)
  mix = _mix(args.batch)
  built = {}
  for f, lv in mix:
    key = (f.name, tuple(sorted(lv.items())))
    if key not in built:
      built[key] = f.build(tok, **lv)
  programs = stack_programs([built[(f.name, tuple(sorted(lv.items())))] for f, lv in mix])
  interp = bench_interpreter(programs, args.batch, args.scan, args.repeats)
  py = bench_python(mix, args.python_steps, args.repeats)
  py_enc = bench_python(mix, args.python_steps // 2, args.repeats, tok)
  best = max(interp["step_calls_steps_per_s"], interp["scan_steps_per_s"])
  print(
    json.dumps(
      dict(
        batch=args.batch,
        families=len(FAMILIES),
        programs=len(built),
        tokenizer=args.tokenizer,
        interpreter=interp,
        python_steps_per_s=py,
        python_plus_encode_steps_per_s=py_enc,
        ratio_vs_python=best / py,
        ratio_vs_python_plus_encode=best / py_enc,
        goal_ratio=100,
        device=str(jax.devices()[0].platform),
        cpu_count=os.cpu_count(),
        load_avg=os.getloadavg(),
        machine=platform.machine(),
        note="shared machine: other jobs ran concurrently; medians of side-by-side repeats",
      ),
      indent=1,
    )
  )


if __name__ == "__main__":
  main()
