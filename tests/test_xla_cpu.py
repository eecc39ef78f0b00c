"""`xla_cpu`: the CPU instruction-set cap that makes a run's numbers machine-independent, and the
malloc settings that keep XLA's per-call host buffers."""

import os
import platform
import subprocess
import sys

import pytest

from spade_jax import xla_cpu

X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.skipif(not X86, reason="the cap applies to x86-64 only")
def test_pin_adds_the_cap_once_and_keeps_other_flags():
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  assert xla_cpu.pin_isa(env) == "AVX2"
  assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8 --xla_cpu_max_isa=AVX2"
  assert xla_cpu.pin_isa(env) == "AVX2"
  assert env["XLA_FLAGS"].count("xla_cpu_max_isa") == 1
  empty = {}
  xla_cpu.pin_isa(empty)
  assert empty["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2"


def test_a_users_cap_or_native_opt_out_is_left_alone():
  env = {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"}
  assert xla_cpu.pin_isa(env) == "SSE4_2"
  assert env["XLA_FLAGS"] == "--xla_cpu_max_isa=SSE4_2"
  native = {"SPADE_NATIVE_CPU_ISA": "1"}
  assert xla_cpu.pin_isa(native) is None
  assert "XLA_FLAGS" not in native


def test_the_test_session_runs_capped():
  # conftest pins before jax starts, so the golden metrics are recorded and checked capped
  import os

  assert ("--xla_cpu_max_isa=AVX2" in os.environ["XLA_FLAGS"]) == X86


def test_runs_on_cpu_follows_jax_platforms():
  assert xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "cpu"})
  assert not xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "cuda"})
  assert not xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "cuda,cpu"})
  assert not xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "tpu"})


def test_keep_host_buffers_opt_out_and_its_environment_twin():
  assert not xla_cpu.keep_host_buffers({"SPADE_HOST_MALLOC": "default", "JAX_PLATFORMS": "cpu"})
  # an accelerator run keeps glibc's defaults
  assert not xla_cpu.keep_host_buffers({"JAX_PLATFORMS": "tpu"})
  env = xla_cpu.keep_host_buffers_env()
  assert env == {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1),
  }


PROBE = """
import resource
from spade_jax import xla_cpu
kept = xla_cpu.keep_host_buffers()
import jax, jax.numpy as jnp
@jax.jit
def f(x, w):
  a = jnp.tanh(x @ w)  # a 64 MiB temporary buffer, allocated by XLA's worker threads
  return jnp.sum(a @ w.T[:, :8])
x = jnp.ones((4096, 256), jnp.float32)
w = jnp.ones((256, 4096), jnp.float32) / 256
for _ in range(2):
  f(x, w).block_until_ready()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
  f(x, w).block_until_ready()
print(kept, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / 4)
"""


@pytest.mark.skipif(
  sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)
def test_kept_host_buffers_are_not_faulted_in_again_each_call():
  def faults_per_call(choice):
    env = dict(os.environ, JAX_PLATFORMS="cpu", SPADE_HOST_MALLOC=choice)
    env.pop("MALLOC_ARENA_MAX", None)
    out = subprocess.run(
      [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    kept, faults = out.stdout.split()
    return kept == "True", float(faults)

  kept, faults = faults_per_call("keep")
  assert kept and faults < 1000  # the 16,384 pages of the temporary are reused
  kept, faults = faults_per_call("default")
  assert not kept and faults > 10000  # glibc maps the temporary afresh every call
