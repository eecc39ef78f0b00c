"""spade_jax/tiny/config.py: a run's saved config.json loads back to the config that wrote it;
the loss and advantage keys."""

import sys
from pathlib import Path

import pytest

from spade_jax.rl import losses
from spade_jax.spade.config import loss_config
from spade_jax.tiny.config import check_tiny_config, load_run_config, tiny_config

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


def test_default_loss_is_unchanged():
  c = tiny_config()
  check_tiny_config(c)
  want = losses.LossConfig(
    eps_low=0.2,
    eps_high=0.28,
    tis_cap=2.0,
    aggregation="seq_mean_token_mean",
    entropy_coef=0.0,
    kl_coef=0.0,
    temperature=c.agent.temperature,
  )
  assert loss_config(c) == want
  assert c.train.advantage == "zscore"


@pytest.mark.parametrize(
  "key,value", [("advantage", "dr_grpo"), ("kl_estimator", "k0"), ("aggregation", "sum")]
)
def test_bad_loss_values_fail_the_check_in_one_line(key, value):
  c = tiny_config()
  c.train[key] = value
  with pytest.raises(ValueError, match=f"train.{key}={value!r}") as e:
    check_tiny_config(c)
  assert "\n" not in str(e.value)
