"""glibc malloc settings for CPU runs: when the launcher re-executes itself, and that it does so
exactly once with the settings in the environment."""

import os
import platform
import subprocess
import sys

import pytest

from spade_jax import host_malloc

GLIBC_LINUX = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC_LINUX, reason="glibc tunables exist only on Linux with glibc")
def test_wanted_only_for_cpu_runs_without_user_settings():
  assert host_malloc.wanted({}, accelerator=False)
  assert host_malloc.wanted({"JAX_PLATFORMS": "cpu"}, accelerator=False)
  assert not host_malloc.wanted({}, accelerator=True)
  assert not host_malloc.wanted({"JAX_PLATFORMS": "cuda"}, accelerator=False)
  assert not host_malloc.wanted({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, accelerator=False)
  assert not host_malloc.wanted({host_malloc.OPT_OUT: "default"}, accelerator=False)


def test_maybe_reexec_passes_the_command_line_and_the_settings(monkeypatch):
  calls = []
  monkeypatch.setattr(host_malloc, "wanted", lambda environ: True)
  host_malloc.maybe_reexec({"HOME": "/x"}, execve=lambda *a: calls.append(a))
  ((path, argv, env),) = calls
  assert path == sys.executable and argv == list(sys.orig_argv)
  assert env == {"HOME": "/x", "GLIBC_TUNABLES": host_malloc.TUNABLES}
  monkeypatch.setattr(host_malloc, "wanted", lambda environ: False)
  host_malloc.maybe_reexec({}, execve=lambda *a: calls.append(a))
  assert len(calls) == 1


@pytest.mark.skipif(not GLIBC_LINUX, reason="glibc tunables exist only on Linux with glibc")
def test_reexec_happens_once_with_the_settings(monkeypatch):
  code = (
    "import os, sys; from spade_jax import host_malloc; print('start', flush=True); "
    "host_malloc.wanted = lambda environ: 'GLIBC_TUNABLES' not in environ; "
    "host_malloc.maybe_reexec(); print(os.environ['GLIBC_TUNABLES'])"
  )
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", host_malloc.OPT_OUT)}
  out = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
  ).stdout.split()
  assert out == ["start", "start", host_malloc.TUNABLES]  # one re-execution, then the settings
