r"""Evaluates a run's checkpoint (or a base model, or a scripted policy) on the paper's suites.

  python experiments/eval.py --workdir RUN [--step N] [--suites paper] [--k K] [--limit N]
      [--policy model|ground_truth|none] [--model PATH] [--json]

See `spade_jax.eval.cli` (``--help``) for every option and the output layout.
"""

from __future__ import annotations

import os
import sys

# Allow running from a source checkout without installing the package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spade_jax import xla_cpu  # noqa: E402

xla_cpu.setup()  # before anything starts jax (as experiments/run.py)

from spade_jax.eval.cli import main  # noqa: E402

if __name__ == "__main__":
  sys.exit(main())
