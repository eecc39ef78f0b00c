"""A recorded tiny run rebuilt from its workdir, for the analysis tools that replay it."""

from __future__ import annotations

import sys
from pathlib import Path

from spade_jax import checkpoint
from spade_jax.rl.train_state import abstract_state
from spade_jax.tiny.config import load_run_config
from spade_jax.tiny.setup import TinySetup


def restore_tiny_run(run: Path, need_reference: bool = False):
  """A tiny run's workdir, rebuilt: its config (``RUN/config.json``), `TinySetup`, model
  graphdef and the train state of its latest checkpoint. Returns ``(config, setup, graphdef,
  state)``; with ``need_reference``, exits unless the state keeps the frozen warm-started
  policy (``ref_params``)."""
  config = load_run_config(run)
  setup = TinySetup(config)
  graphdef, state, carry = setup.init_state()
  ckpt = checkpoint.Checkpointer(run / "checkpoints", model_config=setup.model_cfg)
  restored, _ = ckpt.restore(abstract_state({"state": state, "carry": carry}), ckpt.latest_step())
  ckpt.close()
  if need_reference and restored["state"].ref_params is None:
    sys.exit("the run keeps no frozen warm-started policy (designer.reference_plays = 0)")
  return config, setup, graphdef, restored["state"]
