"""One sandboxed worker process as the host sees it, the sandbox's typed errors and its config.

`WorkerProcess` starts `python -S -s -B [-P] sandbox/worker.py` (a script: it imports nothing
from the package or site-packages) with `start_new_session` (its own session and process
group), a scrubbed environment (PATH, LANG, LC_ALL, HOME/TMPDIR = scratch, PYTHONHASHSEED=0 and
nothing else: no credentials or inherited secrets), a private scratch directory as cwd (owned
by uid 65534 when the worker will drop root), stdin/stdout pipes for the protocol
(sandbox/protocol.py) and stderr to a file in the scratch (capped by RLIMIT_FSIZE). `kill`
sends SIGKILL to the whole process group, reaps the process and deletes the scratch dir;
`death_error` turns an exit status into a typed error.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

from spade_jax.envs.sandbox import protocol as sandbox_protocol

WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
NOBODY = 65534


class EnvError(Exception):
  """Base of the typed sandbox errors; `reason` is one line for reports."""

  def __init__(self, reason: str, *, collateral: bool = False):
    super().__init__(reason)
    self.reason = reason
    self.collateral = collateral


class EnvTimeout(EnvError):
  """A call exceeded its wall-clock timeout (or the worker its CPU limit); worker killed."""


class EnvCrashed(EnvError):
  """The worker died (signal, exit) or was replaced; the environment instance is gone."""


class EnvException(EnvCrashed):
  """The environment's own code raised; the worker is intact."""


class EnvViolation(EnvError):
  """A denied operation, exceeded limit, tampering or oversized output; worker killed."""


class EnvContractError(EnvError):
  """A method returned the wrong shape or types (docs/DESIGN.md §3.6)."""


@dataclass(frozen=True)
class SandboxConfig:
  """Limits and layers of every worker of a pool (the defaults: BUILD_NOTES.md, "Sandbox,
  validator, check CLI")."""

  load_timeout: float = 30.0  # seconds for worker start-up and for loading one instance
  call_timeout: float = 30.0  # seconds for one reset/step/solution
  memory_bytes: int = 512 * 2**20  # RLIMIT_AS
  cpu_seconds: int = 600  # RLIMIT_CPU over a worker's life; retired after half of it
  file_bytes: int = 2**20  # RLIMIT_FSIZE
  max_open_files: int = 64  # RLIMIT_NOFILE
  max_text_chars: int = 65536  # observation / solution length cap
  max_info_bytes: int = 65536  # info dict (as JSON) cap
  max_reply_bytes: int = 2**20  # frame cap on the host side
  seccomp: bool = True
  landlock: bool = True
  audit_hook: bool = True
  restricted_runtime: bool = True  # restricted builtins/imports, module views, tamper check
  drop_privileges: bool = True  # when running as root: switch workers to uid 65534
  scratch_root: str | None = None  # parent of the per-worker scratch dirs (default: TMPDIR)

  def worker_config(self) -> dict:
    keep = ("memory_bytes", "cpu_seconds", "file_bytes", "max_open_files", "max_text_chars",
            "max_info_bytes", "seccomp", "landlock", "audit_hook", "restricted_runtime", "drop_privileges")  # fmt: skip
    return {k: v for k, v in asdict(self).items() if k in keep}


def _signal_name(sig: int) -> str:
  try:
    return signal.Signals(sig).name
  except ValueError:
    return f"signal {sig}"


class WorkerProcess:
  """One sandboxed process: pipes, frame buffer, outgoing bytes and the ids it hosts."""

  def __init__(self, config: SandboxConfig):
    self.scratch = tempfile.mkdtemp(prefix="spade_sandbox_", dir=config.scratch_root)
    if os.geteuid() == 0 and config.drop_privileges:
      os.chown(self.scratch, NOBODY, NOBODY)
    env = {
      "PATH": "/usr/bin:/bin",
      "LANG": "C.UTF-8",
      "LC_ALL": "C.UTF-8",
      "HOME": self.scratch,
      "TMPDIR": self.scratch,
      "PYTHONHASHSEED": "0",
    }
    flags = ["-S", "-s", "-B"] + (["-P"] if sys.version_info >= (3, 11) else [])
    self.stderr_path = os.path.join(self.scratch, "stderr.log")
    with open(self.stderr_path, "wb") as err:
      self.proc = subprocess.Popen(
        [sys.executable, *flags, WORKER_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        cwd=self.scratch,
        env=env,
        start_new_session=True,
        close_fds=True,
      )
    self.pid = self.proc.pid
    self.wfd, self.rfd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
    os.set_blocking(self.wfd, False)
    os.set_blocking(self.rfd, False)
    self.frames = sandbox_protocol.FrameBuffer(config.max_reply_bytes)
    self.out = b""
    self.envs: set[int] = set()
    self.cpu = 0.0
    self.layers: dict = {}
    self.dead: str | None = None  # why the worker is gone, once it is
    self.retiring = False

  def stderr_tail(self, n: int = 300) -> str:
    try:
      with open(self.stderr_path, "rb") as f:
        f.seek(max(0, os.path.getsize(self.stderr_path) - n))
        return f.read().decode("utf-8", "replace").strip()
    except OSError:
      return ""

  def death_error(self) -> EnvError:
    """Classifies why the process ended (after EOF on its stdout)."""
    try:
      rc = self.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
      self.kill("worker closed its output but did not exit")
      rc = self.proc.returncode
    tail = self.stderr_tail()
    extra = f"; stderr: {tail.splitlines()[-1][:200]}" if tail else ""
    if rc is not None and rc < 0:
      sig = -rc
      if sig == signal.SIGXCPU:
        return EnvTimeout(f"worker exceeded its CPU time limit (SIGXCPU){extra}")
      if sig == signal.SIGXFSZ:
        return EnvViolation(f"worker exceeded the file size limit (SIGXFSZ){extra}")
      if sig == signal.SIGSYS:
        return EnvViolation(f"worker killed by seccomp (SIGSYS){extra}")
      return EnvCrashed(f"worker died with {_signal_name(sig)}{extra}")
    return EnvCrashed(f"worker exited with status {rc}{extra}")

  def kill(self, why: str) -> None:
    """SIGKILL to the whole process group, reap, close pipes, delete the scratch dir."""
    if self.dead is None:
      self.dead = why
    for fn in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: self.proc.kill()):
      try:
        fn()
      except (ProcessLookupError, PermissionError, OSError):
        pass
    try:
      self.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      pass
    for f in (self.proc.stdin, self.proc.stdout):
      try:
        f.close()
      except OSError:
        pass
    shutil.rmtree(self.scratch, ignore_errors=True)
