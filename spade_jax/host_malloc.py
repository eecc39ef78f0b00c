"""glibc malloc settings for runs on XLA's CPU backend, applied by re-executing the launcher.

XLA's CPU runtime takes each call's buffers (outputs and temporaries, hundreds of MB for the
tiny run's update) from ``malloc`` and frees them when the call ends. With glibc's defaults the
freed memory goes back to the kernel: blocks above the mmap threshold are unmapped, the
per-thread arenas (64 MiB heaps) are trimmed, so the next call faults every page in again
(zeroed by the kernel). The tiny update spent ~30% of its time there (``perf stat``: 3.45M page
faults in 11 updates; with `TUNABLES` 0.55M and the median update 2.18 -> 1.55 s, BUILD_NOTES).

`TUNABLES` keeps the memory in the process: one arena for all threads, no mmap'ed blocks, no
trimming. glibc reads ``GLIBC_TUNABLES`` only at process start, so `maybe_reexec` (called by
``experiments/run.py`` before anything else) re-executes the same command line with it set.
It does so only on Linux with glibc, on a host without a GPU or TPU device and with
``JAX_PLATFORMS`` unset or ``cpu`` (the settings concern the CPU backend, and an accelerator
host's allocation pattern is different), and never when ``GLIBC_TUNABLES`` is already set or
``SPADE_MALLOC=default`` opts out. The cost: the process's heap never shrinks below its peak.
"""

from __future__ import annotations

import glob
import os
import platform
import sys
from collections.abc import Mapping

TUNABLES = ":".join(
  (
    "glibc.malloc.arena_max=1",  # one arena: freed blocks are reused by every thread
    "glibc.malloc.mmap_max=0",  # no mmap'ed blocks (unmapped on free, faulted in on reuse)
    "glibc.malloc.trim_threshold=68719476736",  # never hand the heap's top back to the kernel
  )
)
OPT_OUT = "SPADE_MALLOC"  # SPADE_MALLOC=default: leave glibc's defaults
ACCELERATOR_DEVICES = ("/dev/nvidia[0-9]*", "/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


def wanted(environ: Mapping[str, str] = os.environ, accelerator: bool | None = None) -> bool:
  """Whether `maybe_reexec` would re-execute with `TUNABLES` (see the module docstring)."""
  if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
    return False
  if "GLIBC_TUNABLES" in environ or environ.get(OPT_OUT, "") == "default":
    return False
  if environ.get("JAX_PLATFORMS", "") not in ("", "cpu"):
    return False
  if accelerator is None:
    accelerator = any(glob.glob(p) for p in ACCELERATOR_DEVICES)
  return not accelerator


def maybe_reexec(environ: Mapping[str, str] = os.environ, execve=os.execve) -> None:
  """Re-executes this process's command line with ``GLIBC_TUNABLES=TUNABLES`` when `wanted`;
  returns otherwise (and in the re-executed process, which has it set)."""
  if not wanted(environ):
    return
  env = dict(environ, GLIBC_TUNABLES=TUNABLES)
  sys.stdout.flush()
  sys.stderr.flush()
  execve(sys.executable, list(sys.orig_argv), env)
