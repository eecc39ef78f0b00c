"""Running untrusted environment code: the worker (a stdlib-only script, worker.py) and its
lockdown, the static policy, the process pool (pool.py), the wire protocol, the validator and
the `check` CLI."""
