"""Test configuration: fake 8 CPU devices before jax is imported anywhere."""

import os
import tempfile

from spade_jax import xla_cpu

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# machine-independent numerics (the golden metrics depend on it); pytest is not re-executed, the
# runs it starts get glibc's huge pages as experiments/run.py does
xla_cpu.setup(restart=False)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One persistent compilation cache for the session and the runs it starts in subprocesses
# (the kill-and-resume tests recompile the programs the in-process runs already built); the
# subprocesses inherit these variables, so their programs (and numerics) match.
os.environ.setdefault(
  "JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "spade_jax_test_jit_cache")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

assert len(jax.devices()) == 8, "conftest must run before jax initialises its backend"
