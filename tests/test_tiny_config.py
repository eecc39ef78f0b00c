"""spade_jax/tiny/config.py: a run's saved config.json loads back to the config that wrote it."""

import sys
from pathlib import Path

from spade_jax.tiny.config import load_run_config

REPO = Path(__file__).resolve().parents[1]


def test_load_run_config_round_trips_the_saved_json(tmp_path):
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  c = tiny.get_config("reward=regret,seed=3")
  c.spade.plateau = (0.05, 0.2, 0.4, 0.7)
  c.warm_start.variants = 4
  (tmp_path / "config.json").write_text(c.to_json_best_effort())
  got = load_run_config(tmp_path)
  assert got.to_dict() == c.to_dict()
  assert got.spade.plateau == (0.05, 0.2, 0.4, 0.7)  # a tuple again, not a JSON list
  assert load_run_config(tmp_path / "config.json").seed == 3
