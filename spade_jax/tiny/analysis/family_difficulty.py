"""What makes a tiny SPADE environment hard for the tiny agent: family or difficulty knobs?

  python -m spade_jax.tiny.analysis.family_difficulty RUN [--episodes 8] [--variants 32]

Rebuilds the config of a tiny run's workdir (``RUN/config.json``), restores its latest
checkpoint and plays, greedily and without the hint, ``--episodes`` problem instances of

* ``lib``: each training family at its warm-start level (the library programs the warm start
  shows; ``warm_start.max_level``), and
* its difficulty variants (`tiny.variants.library_variants`, ``--variants`` per family, the
  run's seed: the warm start's own variants when the run used them), binned by the mean
  ``log2(knob / easiest-level knob)`` over the family's knobs: ``easier`` (< -0.25), ``near``
  and ``harder`` (> 0.25),

with two policies: ``warm``, the frozen warm-started policy (the yardstick of
``designer/difficulty_ref``; needs a run with ``designer.reference_plays > 0`` or a KL
reference), and ``final``, the checkpoint's current policy. Prints failure rates per policy,
bin and family, and the spread of the family means beside the spread of the bin means.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import jax
import numpy as np

from spade_jax import xla_cpu
from spade_jax.envs.ir import assembly
from spade_jax.tiny import variants as tiny_variants
from spade_jax.tiny.analysis.restore import restore_tiny_run
from spade_jax.tiny.heldout import greedy_rollout, training_settings

BINS = ("lib", "easier", "near", "harder")


def scale_bin(params: dict, base: dict, knobs) -> str:
  r = float(np.mean([math.log2(params[k] / base[k]) for k in knobs]))
  return "easier" if r < -0.25 else ("harder" if r > 0.25 else "near")


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("run")
  ap.add_argument("--episodes", type=int, default=8)
  ap.add_argument("--variants", type=int, default=32)
  args = ap.parse_args(argv)
  run = Path(args.run)
  config, setup, graphdef, restored = restore_tiny_run(run, need_reference=True)

  programs, bins, fams = [], [], []
  for name, level in training_settings(setup.library, config.warm_start.max_level):
    programs.append(setup.library.by_family[name][level])
    bins.append("lib")
    fams.append(name)
  found = tiny_variants.library_variants(
    setup.lang, setup.train_families, args.variants, config.seed, config.designer.library_hints
  )
  for v in found:
    base, knobs = tiny_variants.variant_params(v.family)
    text = setup.lang.decode(list(v.tokens))
    programs.append(assembly.assemble(text, setup.tok, setup.lang.cfg))
    bins.append(scale_bin(v.params, base, knobs))
    fams.append(v.family)
  n = args.episodes
  rng = np.random.default_rng(0)
  seeds = [int(s) for s in rng.integers(2**31, size=len(programs) * n)]
  episodes = [p for p in programs for _ in range(n)]
  bins = np.repeat(np.asarray(bins), n)
  fams = np.repeat(np.asarray(fams), n)
  device = greedy_rollout(
    graphdef, restored.params, setup.tok, setup.framing, config, setup.rollout_spec
  )
  print(f"{run}: {len(programs)} programs x {n} episodes (greedy, unhinted)")
  for policy, params in (("warm", restored.ref_params), ("final", restored.params)):
    out = device(episodes, seeds, [False] * len(episodes), params=params)
    fail = 1.0 - np.asarray(jax.device_get(out.solved_B), np.float64)
    print(f"\n{policy} policy: failure rate by bin (episodes)")
    for b in BINS:
      m = bins == b
      if m.any():
        print(f"  {b:7s} {fail[m].mean():.3f} ({int(m.sum())})")
    print(f"{policy} policy: failure rate by family and bin")
    for f in sorted(set(fams.tolist())):
      cells = [
        f"{b}:{fail[(bins == b) & (fams == f)].mean():.2f}"
        for b in BINS
        if ((bins == b) & (fams == f)).any()
      ]
      print(f"  {f:15s} " + " ".join(cells))
    fam_means = [fail[fams == f].mean() for f in sorted(set(fams.tolist()))]
    bin_means = [fail[bins == b].mean() for b in BINS if (bins == b).any()]
    print(
      f"{policy} policy: spread (max - min) of family means {np.ptp(fam_means):.2f}, "
      f"of bin means {np.ptp(bin_means):.2f}"
    )


if __name__ == "__main__":
  xla_cpu.setup()  # before jax starts: replays run with the numerics of experiments/run.py
  main()
