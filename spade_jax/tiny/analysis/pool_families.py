"""The designer's pools of a tiny run by family: which families it wrote, and whether its games
got harder *within* a family (the frozen warm-started policy as the yardstick).

  python -m spade_jax.tiny.analysis.pool_families RUN [--episodes 8]

Reads the environment records of a tiny run (``RUN/envs/*.json``: the designer's own valid
games, ``source == "new"``), restores the run's latest checkpoint and plays every recorded
program ``--episodes`` times (fixed seeds), greedily and without the hint, with the frozen
warm-started policy (the yardstick of ``designer/difficulty_ref``). Each program is assigned
the library family whose observation text shares the most words with its own (`family_of`:
the designer writes in the library's phrases, so the task statement names the family; the
score is printed). Prints, for the first and the last quarter of the regeneration steps: the
family mix, the failure rate per family, the overall change (what ``difficulty_ref``
measures) and the change within families (the mean of per-family differences over families
written in both quarters, weighted by the smaller count), which leaves out the family mix.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import jax
import numpy as np

from spade_jax import xla_cpu
from spade_jax.envs.ir import assembly
from spade_jax.tiny.analysis.restore import restore_tiny_run
from spade_jax.tiny.heldout import greedy_rollout

_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def obs_words(text: str) -> set[str]:
  """The words of a program's ``obs`` lines' quoted text (its task statement)."""
  words = set()
  for line in text.splitlines():
    if line.strip().startswith("obs "):
      for q in _QUOTED.findall(line):
        words.update(w for w in re.findall(r"[a-z]+", q.lower()) if len(w) > 2)
  return words


def family_of(text: str, families: dict[str, set[str]]) -> tuple[str | None, float]:
  """The family whose statement words overlap ``text``'s most (Jaccard), and that overlap."""
  mine = obs_words(text)
  best, score = None, 0.0
  for name, words in sorted(families.items()):
    j = len(mine & words) / max(1, len(mine | words))
    if j > score:
      best, score = name, j
  return best, score


def quarter_steps(steps) -> dict[str, set]:
  """The first and the last quarter of the distinct ``steps``."""
  order = sorted(set(steps))
  q = max(1, len(order) // 4)
  return {"first": set(order[:q]), "last": set(order[-q:])}


def quarter_table(steps, fams, fail) -> dict:
  """Per quarter ("first", "last" of the distinct steps): family -> (count, mean failure)."""
  out = {}
  for name, chosen in quarter_steps(steps).items():
    m = np.asarray([s in chosen for s in steps])
    out[name] = {
      f: (int((m & (fams == f)).sum()), float(fail[m & (fams == f)].mean()))
      for f in sorted(set(fams[m].tolist()))
    }
    out[name]["*"] = (int(m.sum()), float(fail[m].mean()) if m.any() else float("nan"))
  return out


def within_family_change(table: dict) -> float | None:
  first, last = table["first"], table["last"]
  common = [f for f in first if f != "*" and f in last]
  if not common:
    return None
  w = np.asarray([min(first[f][0], last[f][0]) for f in common], np.float64)
  d = np.asarray([last[f][1] - first[f][1] for f in common])
  return float((w * d).sum() / w.sum())


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("run")
  ap.add_argument("--episodes", type=int, default=8)
  args = ap.parse_args(argv)
  run = Path(args.run)
  config, setup, graphdef, restored = restore_tiny_run(run, need_reference=True)
  families, library_texts = {}, set()
  for (name, _level), toks in setup.library.tokens.items():
    text = setup.lang.decode(list(toks))
    library_texts.add(text.strip())
    if name in setup.train_families:
      families.setdefault(name, set()).update(obs_words(text))
  records = [json.loads(p.read_text()) for p in sorted((run / "envs").glob("*.json"))]
  records = [r for r in records if r.get("source") == "new" and r["valid"]]
  if not records:
    sys.exit(f"{run}: no valid designer games recorded")
  programs, steps, fams, scores = [], [], [], []
  for r in records:
    programs.append(assembly.assemble(r["program"], setup.tok, setup.lang.cfg))
    steps.append(r["step"])
    fam, score = family_of(r["program"], families)
    fams.append(fam or "?")
    scores.append(score)
  n = args.episodes
  seeds = [int(s) for s in np.random.default_rng(0).integers(2**31, size=len(programs) * n)]
  device = greedy_rollout(
    graphdef, restored.ref_params, setup.tok, setup.framing, config, setup.rollout_spec
  )
  episodes = [p for p in programs for _ in range(n)]
  out = device(episodes, seeds, [False] * len(episodes), params=restored.ref_params)
  solved = np.asarray(jax.device_get(out.solved_B), np.float64).reshape(len(programs), n)
  fail = 1.0 - solved.mean(1)
  fams = np.asarray(fams)
  print(
    f"{run}: {len(programs)} designer games x {n} episodes (frozen warm policy, greedy, "
    f"unhinted); family match score median {np.median(scores):.2f}, "
    f"min {np.min(scores):.2f}"
  )
  table = quarter_table(steps, fams, fail)
  for name, chosen in quarter_steps(steps).items():
    cells = " ".join(f"{f}:{c}/{m:.2f}" for f, (c, m) in table[name].items() if f != "*")
    c, m = table[name]["*"]
    texts = [r["program"].strip() for r in records if r["step"] in chosen]
    print(
      f"{name:5s} quarter: {c} games ({len(set(texts))} distinct programs, "
      f"{sum(t in library_texts for t in texts)} verbatim library programs), failure {m:.3f}; "
      f"family:count/failure {cells}"
    )
  print(f"overall change {table['last']['*'][1] - table['first']['*'][1]:+.3f}")
  w = within_family_change(table)
  print("within-family change " + ("n/a" if w is None else f"{w:+.3f}"))


if __name__ == "__main__":
  xla_cpu.setup()  # before jax starts: replays run with the numerics of experiments/run.py
  main()
