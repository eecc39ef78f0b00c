"""spade_jax.tiny.analysis.pool_overlap: same-slot program counts between two runs' records."""

import json
from pathlib import Path

from spade_jax.tiny.analysis import pool_overlap as overlap_mod


def _records(run: Path, programs: dict):
  (run / "envs").mkdir(parents=True)
  for (step, game), text in programs.items():
    record = {"step": step, "game": game, "program": text}
    (run / "envs" / f"step{step:06d}_game{game:02d}.json").write_text(json.dumps(record))


def test_counts_identical_programs_over_common_slots(tmp_path, capsys):
  a, b = tmp_path / "a", tmp_path / "b"
  _records(a, {(0, 0): "p", (0, 1): "q", (2, 0): "r", (4, 0): "s"})
  _records(b, {(0, 0): "p", (0, 1): "x", (2, 0): "r"})
  pa, pb = overlap_mod.programs(a), overlap_mod.programs(b)
  assert overlap_mod.overlap(pa, pb) == (2, 3)  # (4, 0) is only in a
  assert overlap_mod.overlap(pa, pb, max_step=0) == (1, 2)
  overlap_mod.main([str(a), str(b), "--max-step", "2"])
  assert json.loads(capsys.readouterr().out) == {"same_program": 2, "slots": 3}
