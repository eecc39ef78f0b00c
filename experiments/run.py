"""Runs a spade_jax experiment.

  python experiments/run.py --config experiments/configs/NAME.py[:ARG] --workdir DIR \
      [--config.key=value ...]

Running the same command again resumes from the last checkpoint in DIR. Bad input (unknown
config key, wrong type, missing file) prints one line and exits with status 2.
"""

from __future__ import annotations

import os
import sys

from absl import flags
from ml_collections import config_flags

# Allow running from a source checkout without installing the package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "experiment config file[:arg]", lock_config=True)
flags.DEFINE_string("workdir", None, "output directory (checkpoints, metrics, envs, plots)")


def _fail(msg: str) -> None:
  print(f"error: {msg}", file=sys.stderr)
  sys.exit(2)


def main(argv: list[str]) -> int:
  if os.environ.get("SPADE_DISTRIBUTED") == "1":  # multi-host launch (launch/*.sh)
    import jax

    # Before the config is loaded: its imports (gymnax) already start jax's backend, after
    # which jax.distributed.initialize() refuses to run.
    jax.distributed.initialize()
  try:
    FLAGS(argv)
  except flags.Error as e:
    _fail(str(e).splitlines()[0])
  except (KeyError, AttributeError, TypeError, ValueError) as e:
    _fail(f"bad config override: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
  except FileNotFoundError as e:
    _fail(f"config file not found: {e}")
  try:
    config = FLAGS.config
    if config is not None:
      config.keys()  # a config that failed to load raises on first access
  except OSError as e:  # config_flags defers file errors to the first access
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    detail = next((ln for ln in reversed(lines) if "Errno" in ln or "Error" in ln), lines[-1])
    _fail(f"cannot load config: {detail}")
  if config is None:
    _fail("--config is required")
  if not FLAGS.workdir:
    _fail("--workdir is required")

  from spade_jax import train  # imported late: flag errors should not wait for jax

  try:
    train.check_config(config)
  except (ValueError, KeyError, TypeError) as e:
    _fail(str(e))
  try:
    train.train(config, FLAGS.workdir)
  except train.UserError as e:
    _fail(str(e))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
