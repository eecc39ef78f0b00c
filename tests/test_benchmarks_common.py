"""benchmarks/common.py: the tiny benchmarks' shared command line and setup."""

import importlib.util
import sys
from pathlib import Path

import pytest

from spade_jax.tiny.config import typed_config

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_common", REPO / "benchmarks/common.py")
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)


def test_tiny_setup_builds_the_named_config():
  args, config, setup = common.tiny_setup("Doc line.\nmore", reps=3, argv=["--config-arg", "smoke"])
  assert args.reps == 3 and args.config_arg == "smoke"
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  assert config.to_dict() == tiny.get_config("smoke").to_dict()
  assert setup.config == typed_config(config)  # the setup keeps the typed form of the config
  assert setup.spec.num_games == config.spade.num_games


def test_tiny_setup_without_reps_rejects_it():
  args, config, _ = common.tiny_setup("Doc.", argv=[])
  assert args.config_arg == "" and not hasattr(args, "reps")
  with pytest.raises(SystemExit):
    common.tiny_setup("Doc.", argv=["--reps", "2"])


def test_tiny_setup_takes_a_scripts_own_arguments():
  args, _, _ = common.tiny_setup(
    "Doc.",
    argv=["--steps", "5"],
    extra=lambda p: p.add_argument("--steps", type=int, default=40),
  )
  assert args.steps == 5
