"""The sandbox: pool API and batching, typed errors and worker replacement, each protection layer
on its own (the others switched off), and a soak of 1,000 hostile calls.

Every hostile action here is bounded: single fork attempts whose child exits at once, memory
caps of 256 MiB, short timeouts, loopback-only sockets owned by the test.
"""

import os
import platform
import random
import socket
import sys
import textwrap
import time

import pytest

from spade_jax.envs.sandbox.pool import (
  EnvContractError,
  EnvCrashed,
  EnvException,
  EnvTimeout,
  EnvViolation,
  SandboxConfig,
  SandboxPool,
)

SECCOMP_SUPPORTED = sys.platform.startswith("linux") and platform.machine() == "x86_64"
IS_ROOT = os.geteuid() == 0

GAME = """
import random
import re


class CoinEnv:
  def __init__(self, max_turns=5, **kw):
    self.max_turns = max_turns
    self.reset()

  def reset(self, seed=None):
    if seed is not None:
      random.seed(seed)
    self.target = random.randint(1, 1000)
    self.turn = 0
    return f"Guess 1..1000 in \\\\boxed{{}} (turn budget {self.max_turns}).", {"seed": seed}

  def solution(self):
    return str(self.target)

  def step(self, action):
    self.turn += 1
    m = re.search(r"\\\\boxed\\{(-?\\d+)\\}", action)
    if m is None:
      raise ValueError("no boxed answer")
    g = int(m.group(1))
    if g == self.target:
      return "right", 1.0, True, False, {}
    return ("higher" if g < self.target else "lower"), 0.0, False, self.turn >= self.max_turns, {}
"""


def probe(body: str, step: str = 'return "o", 0.0, False, False, {}') -> str:
  """An env whose reset() runs `body` (when called with a seed) and whose step runs `step`."""
  body = textwrap.indent(textwrap.dedent(body).strip("\n"), "      ")
  step = textwrap.indent(textwrap.dedent(step).strip("\n"), "    ")
  return f"""
class ProbeEnv:
  def __init__(self, max_turns=10, **kw):
    self.out = ""

  def reset(self, seed=None):
    if seed is not None:
{body}
    return "probe " + str(self.out), {{}}

  def solution(self):
    return "1"

  def step(self, action):
{step}
"""


def _alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(") ")[1][0] != "Z"
  except (FileNotFoundError, IndexError):
    return False


def _group_members(pgid: int) -> list[int]:
  out = []
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open(f"/proc/{entry}/stat") as f:
          fields = f.read().rsplit(") ", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
          out.append(int(entry))
      except (FileNotFoundError, IndexError, ValueError):
        pass
  return out


def cfg(tmp_path, **kw) -> SandboxConfig:
  kw.setdefault("memory_bytes", 256 * 2**20)
  kw.setdefault("call_timeout", 5.0)
  kw.setdefault("load_timeout", 10.0)
  return SandboxConfig(scratch_root=str(tmp_path), **kw)


# -- API, batching, isolation ----------------------------------------------------------------


def test_batched_calls_match_python_and_instances_are_isolated(tmp_path):
  with SandboxPool(2, cfg(tmp_path)) as pool:
    envs = pool.make_envs(GAME, 4, static_check=True)
    assert {e.worker.pid for e in envs} == set(pool.live_pids()) and len(pool.live_pids()) == 2
    # Interleaved resets on the same worker do not disturb each other's draws, and the
    # module-level random API behaves exactly like CPython's.
    resets = pool.reset_many(envs, [7, 8, 7, 9])
    assert resets[0] == resets[2] and resets[0][1] == {"seed": 7}
    sols = [e.solution() for e in envs]
    for seed, sol in zip([7, 8, 7, 9], sols):
      random.seed(seed)
      assert sol == str(random.randint(1, 1000))
    out = pool.step_many(envs, [f"\\boxed{{{s}}}" for s in sols])
    assert all(o == ("right", 1.0, True, False, {}) for o in out)
    # One failing item does not disturb the others; EnvException leaves the worker intact.
    envs[0].reset(7)
    pids = pool.live_pids()
    out = pool.step_many(envs, ["no answer", "\\boxed{0}", "\\boxed{1000}", "\\boxed{5}"])
    assert isinstance(out[0], EnvException) and "raised ValueError: no boxed answer" in str(out[0])
    assert out[1][1:] == (0.0, False, False, {}) and out[1][0] == "higher"
    assert pool.live_pids() == pids and envs[0].alive
    assert pool.stats == {"workers_started": 2, "workers_killed": 0}
    layers = pool.layers()
    assert layers["audit_hook"] == "on" and layers["restricted_runtime"] == "on"
    assert layers["rlimits"]["RLIMIT_AS"] == 256 * 2**20 and layers["rlimits"]["RLIMIT_CORE"] == 0
    if SECCOMP_SUPPORTED:
      assert layers["seccomp"] == "on"
    if _kernel_landlock_abi():
      assert layers["landlock"].startswith("on (ABI")
    if IS_ROOT:
      assert layers["privileges"] == "dropped to uid/gid 65534"
    pool.close_envs(envs)
    assert not envs[0].alive
    with pytest.raises(EnvCrashed, match="environment is gone: closed"):
      envs[0].reset(1)
  assert pool.live_pids() == []
  with pytest.raises(RuntimeError, match="closed"):
    pool.make_env(GAME)


def test_timeout_kills_worker_group_and_collateral_is_marked(tmp_path):
  spin = probe(
    "self.out = 1", step="while action == 'spin':\n  pass\nreturn 'o', 0.0, False, False, {}"
  )
  with SandboxPool(2, cfg(tmp_path, call_timeout=1.0)) as pool:
    envs = pool.make_envs(spin, 6)  # round robin: 0, 2, 4 on worker A; 1, 3, 5 on worker B
    a, b = envs[0].worker, envs[1].worker
    t = time.monotonic()
    out = pool.step_many(envs, ["ok", "ok", "spin", "ok", "ok", "ok"])
    assert time.monotonic() - t < 8
    assert out[0] == ("o", 0.0, False, False, {})
    assert isinstance(out[2], EnvTimeout) and "timed out after 1 s" in out[2].reason
    assert not out[2].collateral
    assert isinstance(out[4], EnvCrashed) and out[4].collateral  # queued behind the spinner
    assert [out[k] for k in (1, 3, 5)] == [("o", 0.0, False, False, {})] * 3
    assert a.dead and not _alive(a.pid) and _group_members(a.pid) == []
    assert not os.path.exists(a.scratch)
    with pytest.raises(EnvCrashed, match="its worker was replaced") as err:
      envs[0].step("ok")  # lived on the killed worker
    assert err.value.collateral
    pool.make_env(spin)
    assert a not in pool.workers and b in pool.workers
    assert all(w.dead is None for w in pool.workers)
    assert pool.stats == {"workers_started": 3, "workers_killed": 1}


@pytest.mark.parametrize(
  "body, error, reason",
  [
    ("self.out = [0] * (10**9)", EnvViolation, "memory limit exceeded"),
    ("self.out = 'x' * 70000", EnvContractError, "observation has 70006 characters (cap 65536)"),
    ("raise KeyError('k')", EnvException, "raised KeyError: 'k' (line 8)"),
    ("import os", EnvException, "import of module 'os' is not allowed in the sandbox"),
    ("import re\nself.out = re.enum", EnvException, "module 're' has no attribute 'enum'"),
    ("self.out = getattr((), '__cl' + 'ass__')", EnvException, "'__class__' is not allowed"),
    ("import random\nrandom.seed = 1", EnvException, "module 'random' is read-only"),
    ("import random\nsetattr(random.Random, 'seed', 1)", EnvException, "modifying class 'Random'"),
    ("import random\nR = random.Random\nR.seed = 1", EnvViolation, "modified shared module state"),
    ("g = (i for i in [1])\nself.out = ('{0.gi' + '_frame}').format(g)", EnvViolation,
     "denied operation object.__getattr__"),
    ("self.out = open", EnvException, "NameError: name 'open' is not defined"),
    ("import string\nself.out = string.Formatter", EnvException, "has no attribute 'Formatter'"),
    ("import functools\nfunctools.update_wrapper(self, max, assigned=('x',))", EnvException,
     "update_wrapper(assigned=...) is not allowed"),
  ],
)  # fmt: skip
def test_restricted_runtime_errors(tmp_path, body, error, reason):
  with SandboxPool(1, cfg(tmp_path)) as pool:
    env = pool.make_env(probe(body), static_check=False)
    with pytest.raises(error) as err:
      env.reset(1)
    assert reason in err.value.reason
    killed = isinstance(err.value, EnvViolation)
    assert pool.stats["workers_killed"] == int(killed) and env.alive is not killed


def test_restricted_runtime_keeps_the_allowed_stdlib_usable(tmp_path):
  body = """
import collections
import functools
import string
from collections.abc import Sequence
w = functools.wraps(max)(lambda: 0)
self.out = (w.__name__, string.Template("$a!").substitute(a=1), collections.abc.Sequence is Sequence)
"""
  with SandboxPool(1, cfg(tmp_path)) as pool:
    assert pool.make_env(probe(body)).reset(1)[0] == "probe ('max', '1!', True)"


def test_reply_cap_and_crash_are_typed(tmp_path):
  with SandboxPool(1, cfg(tmp_path, max_reply_bytes=2000)) as pool:
    env = pool.make_env(probe("self.out = 'y' * 5000"))
    with pytest.raises(EnvViolation, match="exceeds the 2000-byte output cap"):
      env.reset(1)
  # A real segfault (ctypes is preloaded in the worker; only the restricted runtime and the
  # audit hook would stop this call, and both are off here).
  loose = cfg(tmp_path, restricted_runtime=False, audit_hook=False, drop_privileges=False)
  with SandboxPool(1, loose) as pool:
    env = pool.make_env(probe("import ctypes\nctypes.string_at(0)"), static_check=False)
    with pytest.raises(EnvCrashed, match="worker died with SIGSEGV"):
      env.reset(1)
    assert pool.make_env(GAME).reset(3)[0].startswith("Guess")  # replaced, usable


def test_cpu_limit_and_retirement(tmp_path):
  spin = probe("x = 0\nwhile True:\n  x += 1")
  with SandboxPool(1, cfg(tmp_path, cpu_seconds=1, call_timeout=20)) as pool:
    env = pool.make_env(spin)
    t = time.monotonic()
    with pytest.raises(EnvTimeout, match="CPU time limit"):
      env.reset(1)  # RLIMIT_CPU fires long before the 20 s wall clock
    assert time.monotonic() - t < 15
  burn = probe("x = 0\nfor i in range(2 * 10**6):\n  x += i\nself.out = x")
  with SandboxPool(1, cfg(tmp_path, cpu_seconds=2)) as pool:
    env = pool.make_env(burn)
    first = env.worker
    for _ in range(50):
      env.reset(1)
      if first.retiring:
        break
    assert first.retiring  # past half the CPU budget: no new instances go there
    env.close()
    assert pool.make_env(GAME).worker is not first and first.dead


# -- each layer alone ------------------------------------------------------------------------


@pytest.fixture
def listener():
  srv = socket.socket()
  srv.bind(("127.0.0.1", 0))
  srv.listen(4)
  srv.setblocking(False)
  yield srv
  try:
    conn, _ = srv.accept()
    conn.close()
    raise AssertionError("the sandbox connected to the test's loopback listener")
  except BlockingIOError:
    pass
  finally:
    srv.close()


def _only(tmp_path, **layers):
  base = dict(
    seccomp=False, landlock=False, audit_hook=False, restricted_runtime=False, drop_privileges=False
  )
  return cfg(tmp_path, **(base | layers))


def test_audit_hook_alone(tmp_path, listener):
  outside = tmp_path / "outside.txt"
  port = listener.getsockname()[1]
  cases = {
    "import os\nos.system('touch " + str(outside) + "')": "denied operation os.system",
    f"open({str(outside)!r}, 'w')": "denied operation open",
    "open('/etc/hostname').read()": "denied operation open('/etc/hostname'",
    "import os\nos.kill(os.getppid(), 0)": "denied operation os.kill",
    "import os\npid = os.fork()\nif pid == 0:\n  os._exit(0)": "denied operation os.fork",
    f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)": "socket",
    "import ctypes\nctypes.string_at(0)": "denied operation ctypes",
    "import gc\ngc.get_objects()": "gc",
    "import os\ntry:\n  os.system('true')\nexcept Exception:\n  pass": "denied operation os.system",
  }
  with SandboxPool(1, _only(tmp_path, audit_hook=True)) as pool:
    ok = pool.make_env(
      probe("with open('mine.txt', 'w') as f:\n  f.write('scratch is fine')"), static_check=False
    )
    assert ok.reset(1)[0] == "probe "
    for body, reason in cases.items():
      env = pool.make_env(probe(body), static_check=False)
      with pytest.raises(EnvViolation) as err:
        env.reset(1)
      assert reason in err.value.reason, (body, err.value.reason)
  assert not outside.exists()


@pytest.mark.skipif(not SECCOMP_SUPPORTED, reason="the seccomp filter is x86-64 Linux only")
def test_seccomp_alone(tmp_path, listener):
  port = listener.getsockname()[1]
  cases = [
    "import os\npid = os.fork()\nif pid == 0:\n  os._exit(0)",
    f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
    "import os\nos.execv('/bin/true', ['true'])",
    "import subprocess\nsubprocess.run(['/bin/true'])",
    "import os\nos.kill(os.getppid(), 0)",
    "import os\nos.setsid()",
  ]
  with SandboxPool(1, _only(tmp_path, seccomp=True)) as pool:
    assert pool.layers()["seccomp"] == "on"
    for body in cases:
      env = pool.make_env(probe(body), static_check=False)
      with pytest.raises(
        EnvException, match=r"PermissionError: \[Errno 1\] Operation not permitted"
      ):
        env.reset(1)
    env = pool.make_env(
      probe("import threading\nthreading.Thread(target=print).start()"), static_check=False
    )
    with pytest.raises(EnvException, match="can't start new thread"):
      env.reset(1)
    env = pool.make_env(
      probe("import resource\nresource.setrlimit(resource.RLIMIT_CORE, (0, 0))"), static_check=False
    )
    with pytest.raises(EnvException, match="ValueError"):  # setrlimit: EPERM, even to lower
      env.reset(1)
    assert pool.stats["workers_killed"] == 0


def _kernel_landlock_abi() -> int:
  """Landlock ABI version as the kernel reports it to this (test) process, 0 if none."""
  if not sys.platform.startswith("linux"):
    return 0
  import ctypes

  libc = ctypes.CDLL(None, use_errno=True)
  return max(0, libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


@pytest.mark.skipif(_kernel_landlock_abi() < 1, reason="the kernel has no Landlock")
def test_landlock_alone(tmp_path):
  outside = tmp_path / "outside.txt"
  cases = [
    f"open({str(outside)!r}, 'w')",
    "open('/etc/hostname').read()",
    "import os\nos.listdir('/')",
    "import os\nos.execv('/bin/true', ['true'])",
  ]
  if _kernel_landlock_abi() >= 6:  # signals scoped to the sandbox
    cases.append("import os\nos.kill(os.getppid(), 0)")
  with SandboxPool(1, _only(tmp_path, landlock=True)) as pool:
    assert pool.layers()["landlock"] == f"on (ABI {_kernel_landlock_abi()})"
    for body in cases:
      env = pool.make_env(probe(body), static_check=False)
      with pytest.raises(EnvException, match=r"PermissionError: \[Errno (13|1)\]"):
        env.reset(1)
    body = "with open('mine.txt', 'w') as f:\n  f.write('ok')\nimport csv\nself.out = open('mine.txt').read()"
    assert pool.make_env(probe(body), static_check=False).reset(1)[0] == "probe ok"
  assert not outside.exists()


def test_rlimits_alone(tmp_path):
  with SandboxPool(1, _only(tmp_path, file_bytes=4096)) as pool:
    env = pool.make_env(probe("open('big', 'wb').write(b'x' * 10000)"), static_check=False)
    with pytest.raises(EnvException, match="File too large"):
      env.reset(1)
    env = pool.make_env(probe("self.out = bytearray(300 * 2**20)"), static_check=False)
    with pytest.raises(EnvViolation, match="memory limit exceeded"):
      env.reset(1)
    env = pool.make_env(
      probe("import resource\nself.out = [resource.getrlimit(getattr(resource, n))[0] for n in "
            "('RLIMIT_CORE', 'RLIMIT_NOFILE', 'RLIMIT_NPROC')]"),
      static_check=False,
    )  # fmt: skip
    assert env.reset(1)[0] == "probe [0, 64, 1]"


@pytest.mark.skipif(not IS_ROOT, reason="privilege drop applies to workers started by root")
def test_privilege_drop_alone(tmp_path):
  os.chmod(tmp_path, 0o755)
  target = tmp_path / "root_owned.txt"
  with SandboxPool(1, _only(tmp_path, drop_privileges=True)) as pool:
    env = pool.make_env(
      probe("import os\nself.out = (os.getuid(), os.getgid(), os.getgroups())"), static_check=False
    )
    assert env.reset(1)[0] == "probe (65534, 65534, [])"
    env = pool.make_env(probe(f"open({str(target)!r}, 'w')"), static_check=False)
    with pytest.raises(EnvException, match="Permission denied"):
      env.reset(1)
    # RLIMIT_NPROC is effective for the unprivileged worker: a single fork attempt fails.
    env = pool.make_env(
      probe("import os\npid = os.fork()\nif pid == 0:\n  os._exit(0)"), static_check=False
    )
    with pytest.raises(EnvException, match="Resource temporarily unavailable"):
      env.reset(1)
  assert not target.exists()


def test_scrubbed_environment_and_private_scratch(tmp_path, monkeypatch):
  monkeypatch.setenv("SPADE_TEST_SECRET", "hunter2")
  with SandboxPool(1, _only(tmp_path)) as pool:
    env = pool.make_env(
      probe(
        "import os\nself.out = (sorted(os.environ), os.getcwd(), os.environ.get('PYTHONHASHSEED'))"
      ),
      static_check=False,
    )
    obs = env.reset(1)[0]
    scratch = env.worker.scratch
    assert "SPADE_TEST_SECRET" not in obs and "hunter2" not in obs
    assert (
      obs
      == f"probe (['HOME', 'LANG', 'LC_ALL', 'PATH', 'PYTHONHASHSEED', 'TMPDIR'], {scratch!r}, '0')"
    )
    assert os.path.dirname(scratch) == str(tmp_path)
  assert os.listdir(tmp_path) == []


def test_whole_process_group_is_killed(tmp_path):
  # All layers off: the env forks a child that would live 20 s, then spins. The timeout must
  # kill the child too (same process group), not only the worker.
  body = """
import os, time
pid = os.fork()
if pid == 0:
  time.sleep(20)
  os._exit(0)
self.out = pid
while True:
  pass
"""
  with SandboxPool(1, _only(tmp_path, call_timeout=1.5)) as pool:
    env = pool.make_env(probe(body), static_check=False)
    pgid = env.worker.pid
    with pytest.raises(EnvTimeout):
      env.reset(1)
    deadline = time.monotonic() + 5
    while _group_members(pgid) and time.monotonic() < deadline:
      time.sleep(0.05)
    assert _group_members(pgid) == []


# -- soak ------------------------------------------------------------------------------------

HOSTILE_STEPS = """
import random


class HostileEnv:
  def __init__(self, max_turns=10, **kw):
    self.hoard = []

  def reset(self, seed=None):
    return "hostile", {}

  def solution(self):
    return "1"

  def step(self, action):
    if action == "raise":
      raise RuntimeError("boom")
    if action == "deny":
      return ("{0.gi" + "_frame}").format(x for x in [1]), 0.0, False, False, {}
    if action == "mem":
      self.hoard.append(bytearray(2**30))
    if action == "bad":
      return "o", 2.0, False, False, {}
    if action == "spin":
      while True:
        pass
    return "o", 0.0, False, False, {}
"""


def _fds() -> int:
  return len(os.listdir("/proc/self/fd"))


def _rss_mb() -> float:
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _children() -> set[int]:
  me = str(os.getpid())
  kids = set()
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open(f"/proc/{entry}/stat") as f:
          fields = f.read().rsplit(") ", 1)[1].split()
        if fields[1] == me:
          kids.add(int(entry))
      except (FileNotFoundError, IndexError):
        pass
  return kids


@pytest.mark.slow
def test_soak_1000_hostile_calls(tmp_path):
  """1,000 consecutive hostile calls through the trainer API: no leaked processes, fds, memory or
  scratch dirs; the loop itself is bounded in time."""
  # Per 20 calls: 2 kill the worker (a denied operation, a memory bomb), 18 do not (static
  # rejections, exceptions, contract violations); every 200th call spins into a timeout.
  kinds = ["raise", "bad", "static", "raise", "deny", "bad", "raise", "bad", "static", "bad"]
  kinds += ["raise", "bad", "static", "raise", "bad", "bad", "raise", "mem", "static", "bad"]
  children, fds = _children(), _fds()
  with SandboxPool(2, cfg(tmp_path, call_timeout=0.5)) as pool:
    envs = pool.make_envs(HOSTILE_STEPS, 2)
    rss = _rss_mb()
    t = time.monotonic()
    counts: dict = {}
    for i in range(1000):
      kind = "spin" if i % 200 == 199 else kinds[i % len(kinds)]
      k = i % 2
      if kind == "static":
        with pytest.raises(EnvViolation, match="static check failed"):
          pool.make_env("import os\nos.system('true')\n")
        counts["static"] = counts.get("static", 0) + 1
        continue
      if not envs[k].alive:
        envs[k] = pool.make_env(HOSTILE_STEPS)
      res = pool.step_many([envs[k]], [kind])[0]
      expected = {"raise": EnvException, "bad": EnvContractError, "deny": EnvViolation,
                  "mem": EnvViolation, "spin": EnvTimeout}[kind]  # fmt: skip
      assert isinstance(res, expected), (i, kind, res)
      counts[type(res).__name__] = counts.get(type(res).__name__, 0) + 1
    elapsed = time.monotonic() - t
    assert elapsed < 120, f"soak took {elapsed:.1f} s"
    assert len(pool.live_pids()) <= 2
    assert pool.stats["workers_killed"] == counts["EnvViolation"] + counts["EnvTimeout"]
    assert _rss_mb() - rss < 64
  assert _children() <= children  # every worker reaped
  assert _fds() <= fds + 2
  assert os.listdir(tmp_path) == []
  assert sum(counts.values()) == 1000


def test_signal_names_are_reported(tmp_path):
  with SandboxPool(1, _only(tmp_path)) as pool:
    env = pool.make_env(probe("import os\nos.kill(os.getpid(), 9)"), static_check=False)
    with pytest.raises(EnvCrashed, match="worker died with SIGKILL"):
      env.reset(1)
