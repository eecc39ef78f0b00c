"""`xla_cpu.pin_isa`: the CPU instruction-set cap that makes a run's numbers machine-independent."""

import platform

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
