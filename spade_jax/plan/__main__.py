"""``python -m spade_jax.plan`` (see the package docstring)."""

import sys

from spade_jax.plan.cli import main

sys.exit(main())
