r"""Runs a spade_jax experiment.

  python experiments/run.py --config experiments/configs/NAME.py[:ARG] --workdir DIR \
      [--config.key=value ...] \
      [--coordinator_address HOST:PORT --num_processes N --process_id I]

Running the same command again resumes from the last checkpoint in DIR. Bad input (unknown
config key, wrong type, missing file) prints one line and exits with status 2. On x86 CPUs,
XLA's CPU code is capped at AVX2 so a run's numbers do not depend on the machine
(`spade_jax.xla_cpu`; ``SPADE_NATIVE_CPU_ISA=1`` uses the host's full instruction set), and on
CPU the process re-executes itself once with glibc's ``glibc.malloc.hugetlb=1`` (transparent
huge pages for XLA's large per-call buffers; ``SPADE_HOST_MALLOC=default`` leaves glibc alone).

Multi-host: the three distributed flags (all or none) start `jax.distributed` before anything
starts jax's backend; so does ``SPADE_DISTRIBUTED=1`` without them, with the values taken from
SLURM or a Cloud TPU VM (launch/*.sh). Every process runs the same command with its own
``--process_id``; process 0 writes the workdir's files, every process takes part in the
checkpoints (`spade_jax.multihost`).

The config's ``front_end`` picks the loop: ``"tiny"`` (experiments/configs/tiny.py) runs
`spade_jax.tiny.train.train_tiny`, anything else the Python-environment loop
`spade_jax.train.train`.
"""

from __future__ import annotations

import os
import sys

from absl import flags
from ml_collections import config_flags

# Allow running from a source checkout without installing the package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spade_jax import xla_cpu  # noqa: E402

# Before anything starts jax: CPU numerics independent of the host's instruction set, and on
# CPU huge pages for XLA's per-call buffers (spade_jax.xla_cpu: may re-execute this process).
xla_cpu.setup()

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "experiment config file[:arg]", lock_config=True)
flags.DEFINE_string("workdir", None, "output directory (checkpoints, metrics, envs, plots)")

# The distributed flags live apart: they are parsed, and jax.distributed started, before FLAGS
# loads the config (whose imports start jax's backend).
DIST_FLAGS = flags.FlagValues()
flags.DEFINE_string(
  "coordinator_address", None, "HOST:PORT of process 0's coordinator", flag_values=DIST_FLAGS
)
flags.DEFINE_integer("num_processes", None, "processes of a multi-host run", flag_values=DIST_FLAGS)
flags.DEFINE_integer("process_id", None, "this process's index, 0..N-1", flag_values=DIST_FLAGS)


def _fail(msg: str) -> None:
  print(f"error: {msg}", file=sys.stderr)
  sys.exit(2)


def is_tiny(config) -> bool:
  """The tiny on-device front end (`spade_jax.tiny`) instead of the Python-environment loop."""
  return config.get("front_end", "python") == "tiny"


def check_config(config) -> None:
  """Raises ValueError on a config the selected front end cannot run."""
  if is_tiny(config):
    from spade_jax.tiny.config import typed_config

    typed_config(config)  # the checks of check_tiny_config, then its keys and types
  else:
    from spade_jax import train as python_train

    python_train.check_config(config)


def train(config, workdir) -> dict:
  """Runs (or resumes) ``config`` in ``workdir`` with its front end's loop; returns the last
  logged metrics. Bad input raises `spade_jax.runner.UserError`."""
  if is_tiny(config):
    from spade_jax.tiny.train import train_tiny

    return train_tiny(config, workdir)
  from spade_jax import train as python_train

  return python_train.train(config, workdir)


def start_distributed(argv: list[str]) -> list[str]:
  """Parses the distributed flags out of ``argv`` and, when they (or ``SPADE_DISTRIBUTED=1``)
  ask for it, starts jax.distributed; returns the other arguments. Bad values exit 2."""
  try:
    rest = DIST_FLAGS(argv, known_only=True)
  except flags.Error as e:
    _fail(str(e).splitlines()[0])
  given = (DIST_FLAGS.coordinator_address, DIST_FLAGS.num_processes, DIST_FLAGS.process_id)
  if given != (None, None, None) or os.environ.get("SPADE_DISTRIBUTED") == "1":
    from spade_jax import multihost  # imports jax (but starts no backend)

    try:
      args = multihost.check_args(*given)
    except ValueError as e:
      _fail(str(e))
    # Before the config is loaded: its imports (gymnax) already start jax's backend, after
    # which jax.distributed.initialize() refuses to run.
    try:
      multihost.initialize(args)
    except (RuntimeError, ValueError) as e:
      _fail(f"jax.distributed: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}")
  return rest


def main(argv: list[str]) -> int:
  if any(a in ("-h", "--help", "-help") for a in argv[1:]):
    print(__doc__.strip())
    return 0
  argv = start_distributed(argv)
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

  from spade_jax.runner import UserError  # imported late: flag errors should not wait for jax

  try:
    check_config(config)
  except (ValueError, KeyError, TypeError) as e:
    _fail(str(e))
  try:
    train(config, FLAGS.workdir)
  except UserError as e:
    _fail(str(e))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
