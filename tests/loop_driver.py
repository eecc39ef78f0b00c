"""Runs the scripted-designer SPADE loop in its own process (for the kill-and-resume test).

python tests/loop_driver.py WORKDIR MODEL_DIR TOKENIZER_DIR STEPS [tool_use]

With `tool_use`, the tool-use setting's scripted loop of test_tool_loop.py.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spade_jax import xla_cpu  # noqa: E402

xla_cpu.setup()  # as in conftest: the in-process run it is compared with is capped

import pytest  # noqa: E402
import test_loop  # noqa: E402
import test_tool_loop  # noqa: E402

from spade_jax import train  # noqa: E402

if __name__ == "__main__":
  workdir, model_dir, tok_dir, steps = sys.argv[1:5]
  tools = sys.argv[5:6] == ["tool_use"]
  with pytest.MonkeyPatch.context() as mp:
    if tools:
      test_tool_loop.install_scripted_designer(mp)
      config = test_tool_loop.tool_config(model_dir, tok_dir)
    else:
      test_loop.install_scripted_designer(mp)
      config = test_loop.tiny_config(model_dir, tok_dir)
    config.steps = int(steps)
    train.train(config, workdir)
