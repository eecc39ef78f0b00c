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
"""

from __future__ import annotations

import os
import platform

ISA = "AVX2"
FLAG = "--xla_cpu_max_isa"
NATIVE_ENV = "SPADE_NATIVE_CPU_ISA"


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
