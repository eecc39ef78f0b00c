"""Two samplers in the same decode loop, one process, repetitions interleaved: the engine's
``choose_tokens`` against another version's (``--old``, a ``sampling.py`` file, e.g. extracted
with ``git show 0431b88:spade_jax/engine/sampling.py > /tmp/old_sampling.py``).

The tiny model and modes of ``benchmarks/generate.py``; 64-token prompts, ``--new`` tokens.
Prints one JSON row per (batch, mode): decode tokens/s of each, the speedup, and each one's time
relative to its own greedy run. Example::

  python benchmarks/sampler_ab.py --old /tmp/old_sampling.py --reps 4
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--old", required=True, help="path of the other version's sampling.py")
  ap.add_argument("--batches", default="16,64")
  ap.add_argument("--new", type=int, default=128)
  ap.add_argument("--reps", type=int, default=3)
  args = ap.parse_args()

  from generate import MODES, build

  from spade_jax.engine import decode
  from spade_jax.engine.generate import Engine, SamplingParams, _run_fn

  spec = importlib.util.spec_from_file_location("old_sampling", args.old)
  old = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(old)
  choose = {"old": old.choose_tokens, "new": decode.choose_tokens}
  model, cfg = build("tiny", jnp.float32)
  engine = Engine(model)
  # one jit per version: decode._step reads decode.choose_tokens when it is traced
  jits = {
    w: jax.jit(lambda g, p, s, sp, n: _run_fn(g, p, s, sp, n, None), static_argnums=0)
    for w in choose
  }
  for B in (int(b) for b in args.batches.split(",")):
    prompts = np.random.default_rng(B).integers(0, cfg.vocab_size, (B, 64))

    def once(which, kw, B=B, prompts=prompts):
      decode.choose_tokens = choose[which]
      s = jax.block_until_ready(engine.init(prompts, max_new_tokens=args.new))
      sp = SamplingParams.make(B, **kw)
      t = time.perf_counter()
      jax.block_until_ready(jits[which](engine.graphdef, engine.params, s, sp, np.int32(2**30)))
      return time.perf_counter() - t

    for kw in MODES.values():  # compile
      for w in choose:
        once(w, kw)
    times = {}
    for _ in range(args.reps):
      for m, kw in MODES.items():
        for w in choose:
          times.setdefault((m, w), []).append(once(w, kw))
    med = {k: statistics.median(v) for k, v in times.items()}
    for m in MODES:
      row = dict(batch=B, mode=m, new=args.new, load_avg_1m=round(os.getloadavg()[0], 2))
      for w in choose:
        row[f"{w}_tok_s"] = round(B * args.new / med[(m, w)])
        row[f"{w}_vs_greedy"] = round(med[(m, w)] / med[("greedy", w)], 2)
      row["speedup"] = round(med[(m, "old")] / med[(m, "new")], 2)
      print(json.dumps(row), flush=True)
  decode.choose_tokens = choose["new"]


if __name__ == "__main__":
  main()
