"""`python -m spade_jax.envs.check FILE --json ...`: the stable spelling of the validator CLI
(docs/DESIGN.md §3.4); the implementation is `spade_jax.envs.sandbox.check`."""

import sys

from spade_jax.envs.sandbox.check import main

if __name__ == "__main__":
  sys.exit(main())
