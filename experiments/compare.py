r"""Compares two or more evaluated runs suite by suite (B - A, paired by prompt).

  python experiments/compare.py RUN_A[:LABEL] RUN_B[:LABEL] [...] [--names a,b] [--json]

See `spade_jax.eval.compare` (``--help``).
"""

from __future__ import annotations

import os
import sys

# Allow running from a source checkout without installing the package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spade_jax.eval.compare import main  # noqa: E402

if __name__ == "__main__":
  sys.exit(main())
