"""Runs the scripted-designer SPADE loop of test_loop.py through `experiments/run.py` (for the
multi-process test, tests/test_multihost.py).

python tests/multihost_driver.py MODEL_DIR TOKENIZER_DIR RUN_ARGS...

RUN_ARGS go to run.py after ``--config`` (this file, whose `get_config` is test_loop's tiny
config on the given model): ``--workdir``, overrides, and the distributed flags. The device
count comes from the caller's ``XLA_FLAGS`` (4 per process for 2 processes, 8 for one).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def get_config(arg: str):
  """test_loop's tiny Python-loop config; ``arg`` is ``MODEL_DIR,TOKENIZER_DIR``."""
  sys.path.insert(0, HERE)
  import test_loop

  model_dir, tok_dir = arg.split(",")
  return test_loop.tiny_config(model_dir, tok_dir)


if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  sys.path.insert(0, HERE)
  sys.path.insert(0, os.path.join(ROOT, "experiments"))
  import pytest
  import run  # experiments/run.py: caps XLA's CPU code at AVX2 on import, as the tests do

  model_dir, tok_dir, *run_args = sys.argv[1:]
  config = f"--config={os.path.abspath(__file__)}:{model_dir},{tok_dir}"
  with pytest.MonkeyPatch.context() as mp:
    import test_loop  # imports jax, but starts no backend (run.main starts jax.distributed)

    test_loop.install_scripted_designer(mp)
    sys.exit(run.main([run.__file__, config, *run_args]))
