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

`use_huge_pages` and `restart_with_huge_pages` are about speed, not numbers. XLA:CPU allocates
each executable's temporary buffer per call, from its worker threads (an update step's is
hundreds of MB). glibc serves a thread's large allocation with a fresh ``mmap`` and unmaps it on
free, so every call faults the whole buffer in again, 4 KiB at a time: ~95,000 faults and ~0.2
CPU s of kernel time per step of the 16 x 192 update in BUILD_NOTES ("Speed vs Tunix and HF").
glibc's ``glibc.malloc.hugetlb=1`` tunable has it ask for transparent huge pages on those maps
(``madvise``), so a call takes ~250 faults of 2 MiB instead. glibc reads tunables only when a
process starts, so `restart_with_huge_pages` re-executes the entry point (same pid, argv and
environment, plus the tunable) before anything else happens; children started later inherit it.
It applies to processes that run XLA on CPU (``JAX_PLATFORMS=cpu``, or no accelerator plugin
installed) on glibc Linux; ``SPADE_HOST_MALLOC=default`` leaves glibc alone, ``=huge`` asks
anyway (an accelerator host's own CPU work), and a ``glibc.malloc.hugetlb`` the user set is
kept. Kernels with transparent huge pages off (``never``) ignore the advice. (Keeping the
buffers instead, one malloc arena and no ``mmap``, removed the faults too but made XLA's
multi-threaded compiler contend for the one arena: compiles took ~25 % longer.)
"""

from __future__ import annotations

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
TUNABLES = "GLIBC_TUNABLES"
HUGETLB = "glibc.malloc.hugetlb"
STARTED_WITH = os.environ.get(TUNABLES, "")  # what glibc read when this process started


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


def use_huge_pages(env=None) -> bool:
  """Adds ``glibc.malloc.hugetlb=1`` to ``env["GLIBC_TUNABLES"]`` (default: the process
  environment) where it applies (see the module text); returns whether ``env`` now asks glibc
  for huge pages."""
  env = os.environ if env is None else env
  choice = env.get(MALLOC_ENV, "")
  tunables = env.get(TUNABLES, "")
  if HUGETLB + "=" in tunables:  # the user's own setting
    return HUGETLB + "=0" not in tunables
  if choice == "default" or sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
    return False
  if choice != "huge" and not runs_on_cpu(env):
    return False
  env[TUNABLES] = ":".join(t for t in (tunables, HUGETLB + "=1") if t)
  return True


def restart_with_huge_pages() -> None:
  """Where `use_huge_pages` applies and this process did not start with the tunable,
  re-executes it (``os.execve``: same pid, interpreter flags and argv) with the tunable; call it
  first thing in an entry point, before anything has been printed, started or written."""
  if use_huge_pages() and HUGETLB not in STARTED_WITH:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], os.environ)


def setup(restart: bool = True) -> None:
  """What an entry point calls first, before jax starts: `pin_isa`, then
  `restart_with_huge_pages` (``restart=False``, for a process that must not be re-executed such
  as pytest or a notebook: only `use_huge_pages`, so the processes it starts get them)."""
  pin_isa()
  if restart:
    restart_with_huge_pages()
  else:
    use_huge_pages()
