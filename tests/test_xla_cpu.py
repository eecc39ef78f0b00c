"""`xla_cpu`: the CPU instruction-set cap that makes a run's numbers machine-independent, and
glibc's huge pages for XLA's per-call host buffers."""

import os
import platform
import subprocess
import sys
from pathlib import Path

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
  assert ("--xla_cpu_max_isa=AVX2" in os.environ["XLA_FLAGS"]) == X86


def test_runs_on_cpu_follows_jax_platforms():
  assert xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "cpu"})
  assert not xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "cuda"})
  assert not xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "cuda,cpu"})
  assert not xla_cpu.runs_on_cpu({"JAX_PLATFORMS": "tpu"})


def test_use_huge_pages_adds_the_tunable_where_it_applies():
  glibc_linux = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
  env = {"JAX_PLATFORMS": "cpu", "GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}
  assert xla_cpu.use_huge_pages(env) == glibc_linux
  if glibc_linux:
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1"
  # opted out, an accelerator run, or the user's own value: left as it is
  for env in (
    {"JAX_PLATFORMS": "cpu", "SPADE_HOST_MALLOC": "default"},
    {"JAX_PLATFORMS": "tpu"},
  ):
    assert not xla_cpu.use_huge_pages(env) and "GLIBC_TUNABLES" not in env
  own = {"JAX_PLATFORMS": "cpu", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
  assert not xla_cpu.use_huge_pages(own)
  assert own["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"


PROBE = """
import os, resource, sys
from spade_jax import xla_cpu
xla_cpu.restart_with_huge_pages()
print("argv", sys.argv[1:], os.getpid())
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
print("faults", (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / 4)
"""


@pytest.mark.skipif(
  sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)
def test_restart_with_huge_pages_cuts_the_faults_of_xlas_buffers():
  thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
  if not thp.exists() or "[never]" in thp.read_text():
    pytest.skip("transparent huge pages are off on this kernel")

  def run(choice):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env.update(JAX_PLATFORMS="cpu", SPADE_HOST_MALLOC=choice)
    proc = subprocess.Popen(
      [sys.executable, "-c", PROBE, "a", "b c"], env=env, stdout=subprocess.PIPE, text=True
    )
    out, _ = proc.communicate()
    assert proc.returncode == 0
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    # the re-executed process keeps the pid and the arguments, and printed nothing before
    assert lines["argv"] == f"['a', 'b c'] {proc.pid}"
    assert out.count("argv") == 1
    return float(lines["faults"])

  huge, small = run(""), run("default")
  assert small > 10000  # glibc maps the 16,384 pages of the temporary afresh every call
  assert huge < small / 10  # 2 MiB pages
