"""The base config's loss and advantage keys (spade_jax/spade/config.py): the defaults build the
SPADE recipe's loss, every key reaches `LossConfig` / the agent, bad values fail the check in
one line."""

import pytest

from spade_jax.rl import losses
from spade_jax.spade.config import base_config, check_config, loss_config


def test_defaults_are_the_recipe():
  c = base_config()
  check_config(c)
  assert loss_config(c) == losses.LossConfig(temperature=c.agent.temperature)
  assert c.train.advantage == "zscore" and c.train.dynamic_sampling is False


def test_keys_reach_the_loss():
  c = base_config()
  c.train.kl_coef = 0.1
  c.train.kl_estimator = "k2"
  c.train.aggregation = "constant_norm"
  c.train.norm_constant = 4096
  c.train.entropy_coef = 0.01
  c.train.logprob_chunk = 64
  c.train.tis_cap = 0.0  # 0: TIS off
  c.train.advantage = "center"
  c.train.dynamic_sampling = True
  check_config(c)
  got = loss_config(c)
  assert (got.kl_coef, got.kl_estimator, got.aggregation) == (0.1, "k2", "constant_norm")
  assert (got.norm_constant, got.entropy_coef, got.logprob_chunk) == (4096, 0.01, 64)
  assert got.tis_cap is None


@pytest.mark.parametrize(
  "key,value,match",
  [
    ("advantage", "grpo", "train.advantage='grpo'"),
    ("kl_estimator", "k4", "train.kl_estimator='k4'"),
    ("aggregation", "mean", "train.aggregation='mean'"),
    ("norm_constant", -1, "train.norm_constant"),
    ("logprob_chunk", 0, "train.logprob_chunk"),
    ("dynamic_sampling_rounds", 0, "train.dynamic_sampling_rounds"),
  ],
)
def test_bad_values_fail_the_check_in_one_line(key, value, match):
  c = base_config()
  c.train[key] = value
  with pytest.raises(ValueError, match=match) as e:
    check_config(c)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize(
  "path,value,match",
  [
    (("setting",), "chess", "setting='chess'"),
    (("designer", "tool_difficulties"), "easy,extreme", "designer.tool_difficulties"),
    (("designer", "tool_difficulties"), "", "designer.tool_difficulties"),
    (("designer", "multi_instruction"), 1.5, "designer.multi_instruction"),
    (("spade", "hint_plays"), -1, "spade.hint_plays"),
  ],
)
def test_bad_setting_values_fail_the_check(path, value, match):
  c = base_config()
  section = c
  for key in path[:-1]:
    section = section[key]
  section[path[-1]] = value
  with pytest.raises(ValueError, match=match):
    check_config(c)


def test_tool_use_setting_rotates_its_six_skills():
  c = base_config()
  c.setting = "tool_use"
  c.spade.active_skills = 6
  c.spade.hint_plays = 16  # more hinted than unhinted plays is allowed (fresh seeds beyond)
  check_config(c)
  c.spade.active_skills = 7
  with pytest.raises(ValueError, match=r"active_skills must lie in \[1, 6\]"):
    check_config(c)


def test_smollm2_cpu_warm_arg_turns_the_designer_warm_start_on():
  import importlib.util
  from pathlib import Path

  path = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "smollm2_cpu.py"
  spec = importlib.util.spec_from_file_location("smollm2_cpu_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert module.get_config("reply=helpers").warm_start.steps == 0  # off by default
  warm = module.get_config("reply=helpers,warm=1")
  assert (warm.warm_start.steps, warm.warm_start.batch) == (16, 2)
  check_config(warm)
