"""Machine-independent CPU numerics: XLA compiles CPU programs for at most one instruction set.

XLA compiles a CPU program for the instruction set of the machine it runs on. With AVX-512 a
reduction or a matrix product adds its terms in a different order than with AVX2, so the same
run gives different floats on different x86 machines, and an RL run then diverges: the tiny
default job's first warm-start designer NLL was 6.214287 on an AVX-512 machine, 6.214288 on
the same machine capped at AVX2 and 6.214350 capped at SSE4.2 (BUILD_NOTES, "Reproducible
numerics"). `pin_isa` caps XLA's CPU code generation at `ISA`, which every x86-64 CPU of the
last decade has, so a run's numbers (and the golden test's) are the same on any such machine.

It only edits ``XLA_FLAGS``, so it must run before jax initialises its backends;
`experiments/run.py` and the tests call it first thing. It leaves alone non-x86 machines (their
own instruction sets), a cap the user already set, and ``SPADE_NATIVE_CPU_ISA=1`` (the host's
full instruction set: faster on CPU, numbers tied to the machine). Accelerator backends are not
affected: the flag applies to the CPU backend only.

`keep_host_buffers` is about speed, not numbers. XLA:CPU allocates each executable's temporary
buffer per call, from its worker threads (an update step's is hundreds of MB). glibc serves a
thread's large allocation with a fresh ``mmap`` and unmaps it on free, so every call page-faults
the whole buffer in again: ~95,000 faults and ~0.2 CPU s of kernel time per step of the 16 x 192
update in BUILD_NOTES ("Speed vs Tunix and HF"). One malloc arena, no ``mmap`` for large blocks
and a high trim threshold make glibc hand the same pages back on the next call. It applies to
processes that run XLA on CPU (``JAX_PLATFORMS=cpu``, or no accelerator plugin installed) on
glibc Linux; ``SPADE_HOST_MALLOC=default`` leaves the allocator alone, ``=keep`` applies it
anyway. Like `pin_isa` it must run before jax starts its backend (threads keep the arena they
first used). The cost: the process keeps its peak heap instead of returning freed memory.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import pkgutil
import platform
import sys

ISA = "AVX2"
FLAG = "--xla_cpu_max_isa"
NATIVE_ENV = "SPADE_NATIVE_CPU_ISA"
MALLOC_ENV = "SPADE_HOST_MALLOC"
# glibc's mallopt parameters (malloc.h) and the values keep_host_buffers sets
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
KEEP = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))  # C ints
# the same settings as glibc reads them from the environment at a process's start
GLIBC_ENV_NAMES = {
  M_ARENA_MAX: "MALLOC_ARENA_MAX",
  M_MMAP_MAX: "MALLOC_MMAP_MAX_",
  M_TRIM_THRESHOLD: "MALLOC_TRIM_THRESHOLD_",
}


def pin_isa(env=None) -> str | None:
  """Adds ``--xla_cpu_max_isa=ISA`` to ``env["XLA_FLAGS"]`` (default: the process environment)
  where it applies; returns the cap now in force, or None when XLA uses the host's own."""
  env = os.environ if env is None else env
  flags = env.get("XLA_FLAGS", "")
  caps = [w.split("=", 1)[1] for w in flags.split() if w.startswith(FLAG + "=")]
  if caps:  # XLA takes the last occurrence
    return caps[-1]
  if env.get(NATIVE_ENV) == "1" or platform.machine().lower() not in ("x86_64", "amd64"):
    return None
  env["XLA_FLAGS"] = f"{flags} {FLAG}={ISA}".strip()
  return ISA


def runs_on_cpu(env=None) -> bool:
  """Whether jax will run on its CPU backend: ``JAX_PLATFORMS`` says only ``cpu``, or it is
  unset and no accelerator is installed (``libtpu``, or a PJRT plugin where jax looks for one:
  the ``jax_plugins`` namespace package or entry points, as CUDA and ROCm install)."""
  env = os.environ if env is None else env
  platforms = [p.strip() for p in env.get("JAX_PLATFORMS", "").split(",") if p.strip()]
  if platforms:
    return platforms == ["cpu"]
  if importlib.util.find_spec("libtpu") is not None:
    return False
  namespace = importlib.util.find_spec("jax_plugins")
  if namespace is not None and any(pkgutil.iter_modules(namespace.submodule_search_locations)):
    return False
  return not importlib.metadata.entry_points(group="jax_plugins")


def keep_host_buffers(env=None) -> bool:
  """Sets glibc's allocator to keep freed large blocks in the process (see the module text);
  returns whether it did."""
  env = os.environ if env is None else env
  choice = env.get(MALLOC_ENV, "")
  if choice == "default" or sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
    return False
  if choice != "keep" and not runs_on_cpu(env):
    return False
  libc = ctypes.CDLL(None)
  return all(libc.mallopt(param, value) == 1 for param, value in KEEP)


def keep_host_buffers_env() -> dict[str, str]:
  """`keep_host_buffers`'s settings as environment variables, for a process that does not import
  spade_jax (glibc reads them at start)."""
  return {GLIBC_ENV_NAMES[param]: str(value) for param, value in KEEP}


def setup() -> None:
  """What an entry point calls first, before jax starts: `pin_isa` and `keep_host_buffers`."""
  pin_isa()
  keep_host_buffers()
