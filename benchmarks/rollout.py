"""Multi-turn rollout throughput: the on-device rollout vs the host loop, side by side.

Both paths play the same batch -- every library family (``--level``), ``--plays`` seeds each,
unhinted and hinted -- with the same tiny random model, the same chat framing, sampling
settings and per-turn budget:

* ``device``: `spade_jax.rollout.device` (one jitted call; turns fed as soon as they end; one
  decode step per token, prefill by the engine's own ``prefill``);
* ``device_sync``: the same with ``sync_turns`` (the host loop's turn schedule);
* ``device_chunk`` / ``device_sync_chunk``: the same with ``chunked`` (prompt prefill and
  feedback consumed ``--chunk`` tokens per forward, `spade_jax.engine.chunk`);
* ``host``: `host_rollout.play` over `Engine` with the library's Python twins stepped on the
  host (``LocalEnvBatch``; each twin replays the interpreter's draws, so the instances match).

All device modes share one compilation (the scheduling flags are data).

Repetitions alternate between the paths so machine load hits them alike; compilation is
excluded (one warm-up call each, its time reported). Reported per path (medians): wall time,
turns/s (assistant turns, summed over episodes), sampled tokens/s (loss-mask tokens), all
tokens/s (sampled + forced feedback) and decode steps; plus ``device / host`` ratios. Prints
one JSON object. Example::

  python benchmarks/rollout.py --plays 2 --new 12 --turns 3 --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))


def _setup(args):
  from flax import nnx
  from hf_fixtures import tiny_tokenizer_dir

  from spade_jax.engine.generate import Engine
  from spade_jax.envs.library import FAMILIES
  from spade_jax.models import Transformer, TransformerConfig
  from spade_jax.rollout import host as host_rollout
  from spade_jax.rollout.chat import ChatFraming
  from spade_jax.rollout.device import DeviceRollout
  from spade_jax.tokenizer import load_tokenizer

  tok = load_tokenizer(tiny_tokenizer_dir() if args.tokenizer == "tiny" else args.tokenizer)
  framing = ChatFraming.from_tokenizer(tok)
  mcfg = TransformerConfig(
    vocab_size=tok.vocab_size,
    embed_dim=args.dim,
    num_layers=args.layers,
    num_heads=4,
    num_kv_heads=2,
    head_dim=args.dim // 4,
    mlp_dim=2 * args.dim,
    qk_norm=True,
    model_type="qwen3",
  )
  model = Transformer(mcfg, rngs=nnx.Rngs(0))
  cfg = host_rollout.RolloutConfig(
    max_turns=args.turns,
    max_new_tokens=args.new,
    max_context=args.context,
    temperature=args.temperature,
  )
  fams = [f for f in FAMILIES.values() for _ in range(args.plays)] * 2
  programs = [f.build(tok, **f.levels[args.level]) for f in fams]
  n = len(fams)
  seeds = [100 + i % (n // 2) for i in range(n)]
  hints = [i >= n // 2 for i in range(n)]
  dev = DeviceRollout(model, tok, framing, cfg, prompt_len=args.prompt, feed_chunk=args.chunk)
  return tok, framing, model, cfg, fams, programs, seeds, hints, dev, Engine(model)


def _host_envs(fams, level, state):
  from spade_jax.envs.ir.draws import DrawReplay, substitute_random

  class Twin:
    def __init__(self, family, draws):
      self.family, self.draws = family, draws
      self.env = family.twin(**family.levels[level])

    def reset(self, seed=None):
      with substitute_random(self.family.twin_module, DrawReplay(self.draws)):
        return self.env.reset(seed)

    def step(self, action):
      return self.env.step(action)

  return [Twin(f, state.draws[i, : state.n_draws[i]]) for i, f in enumerate(fams)]


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--tokenizer", default="tiny", help="tiny (the test BPE) | smollm2 | a path")
  p.add_argument("--dim", type=int, default=32)
  p.add_argument("--layers", type=int, default=2)
  p.add_argument("--plays", type=int, default=2, help="seeds per family (x2 for hints)")
  p.add_argument("--level", type=int, default=1)
  p.add_argument("--turns", type=int, default=3)
  p.add_argument("--new", type=int, default=12, help="sampled tokens per turn")
  p.add_argument("--context", type=int, default=512)
  p.add_argument("--prompt", type=int, default=256)
  p.add_argument("--temperature", type=float, default=1.0)
  p.add_argument("--chunk", type=int, default=16, help="prefill/feedback chunk (*_chunk modes)")
  p.add_argument("--reps", type=int, default=5)
  args = p.parse_args(argv)

  from spade_jax.envs.ir import text
  from spade_jax.envs.ir.program import TPL_HINT
  from spade_jax.rollout import host as host_rollout

  tok, framing, model, cfg, fams, programs, seeds, hints, dev, engine = _setup(args)
  hint_text = [text.items_text(text.template_items(q, TPL_HINT, tok), {}, {}) for q in programs]

  def first(i, obs):
    return obs + "\n\nHINT: " + hint_text[i] if hints[i] and hint_text[i] else obs

  from spade_jax.rollout.device import rollout

  modes = {  # (sync_turns, chunked)
    "device": (False, False),
    "device_sync": (True, False),
    "device_chunk": (False, True),
    "device_sync_chunk": (True, True),
  }
  batches = {
    name: jax.device_put(dev.batch(programs, seeds, hints, sync_turns=sync, chunked=chunked))
    for name, (sync, chunked) in modes.items()
  }

  def run_device(name):
    out = rollout(dev.graphdef, dev.params, batches[name], jax.random.PRNGKey(0), dev.spec)
    return jax.block_until_ready(out)

  state = None

  def run_host():
    envs = host_rollout.LocalEnvBatch(_host_envs(fams, args.level, state))
    return host_rollout.play(engine, tok, framing, envs, seeds, first, cfg, seed=0)

  compile_s = {}
  for name in batches:
    t0 = time.perf_counter()
    out = run_device(name)
    compile_s[name] = time.perf_counter() - t0
  state = jax.device_get(out.env_state)
  t0 = time.perf_counter()
  run_host()
  compile_s["host"] = time.perf_counter() - t0

  def measure_device(name):
    t0 = time.perf_counter()
    h = jax.device_get(run_device(name))
    dt = time.perf_counter() - t0
    sampled = int(np.asarray(h.loss_mask_BT).sum())
    total = int((np.asarray(h.length_B) - np.asarray(h.prompt_len_B)).sum())
    return dt, int(np.asarray(h.turns_B).sum()), sampled, total, int(h.steps)

  def measure_host():
    t0 = time.perf_counter()
    res = run_host()
    dt = time.perf_counter() - t0
    sampled = sum(sum(m) for m in res.loss_mask)
    prompts = [m.index(1) if 1 in m else len(m) for m in res.loss_mask]
    total = sum(len(t) for t in res.tokens) - sum(prompts)
    return dt, int(res.turns.sum()), sampled, total, None

  rows = {name: [] for name in [*batches, "host"]}
  for _ in range(args.reps):
    for name in batches:
      rows[name].append(measure_device(name))
    rows["host"].append(measure_host())

  result = {
    "config": vars(args) | {"batch": len(programs), "backend": jax.default_backend()},
    "compile_s": compile_s,
  }
  for name, rs in rows.items():
    wall = statistics.median(r[0] for r in rs)
    result[name] = {
      "wall_s": wall,
      "turns": rs[0][1],
      "turns_per_s": statistics.median(r[1] / r[0] for r in rs),
      "sampled_tokens_per_s": statistics.median(r[2] / r[0] for r in rs),
      "all_tokens_per_s": statistics.median(r[3] / r[0] for r in rs),
      "decode_steps": rs[0][4],
    }
  for name in batches:
    result[f"{name}/host_turns_per_s"] = result[name]["turns_per_s"] / result["host"]["turns_per_s"]
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main()
