"""Run untrusted (designer-written) environments in killable, locked-down worker processes.

The host rollout loop and the validator use `SandboxPool` / `SandboxedEnv`; designer code
never runs in the calling process. Each worker (process.WorkerProcess) is a separate
Python process in its own session and process group, with a scrubbed environment, a private
scratch directory and pipes carrying length-prefixed JSON (sandbox/protocol.py). Inside, the
worker locks itself down before loading any untrusted code (sandbox/lockdown.py: rlimits,
privilege drop, seccomp, audit hook, tamper check; sandbox/worker.py: restricted
builtins/imports and read-only module views), and `make_envs` runs the static AST check
(sandbox/policy.py) on the host first.

The host enforces wall-clock timeouts per call (load/reset/step default 30 s) and caps reply
sizes. A worker that times out, dies, segfaults, exceeds a limit, replies too much or commits a
violation is killed with SIGKILL to its whole process group and replaced on next use. Callers
get typed errors, never a hang: `EnvTimeout`, `EnvCrashed` (worker died; `EnvException` when
the env raised, worker intact), `EnvViolation` (denied operation, resource limit, tampering,
oversized output), `EnvContractError` (wrong return types). Environments that shared a killed
worker fail next time with `EnvCrashed(collateral=True)` so the trainer can drop their
episodes without blaming their designers.
"""

from __future__ import annotations

import itertools
import os
import select
import time
import weakref

from spade_jax.envs.sandbox import policy as sandbox_policy
from spade_jax.envs.sandbox import protocol as sandbox_protocol
from spade_jax.envs.sandbox.process import (
  EnvContractError,
  EnvCrashed,
  EnvError,
  EnvException,
  EnvTimeout,
  EnvViolation,
  SandboxConfig,
  WorkerProcess,
)

__all__ = [
  "EnvContractError",
  "EnvCrashed",
  "EnvError",
  "EnvException",
  "EnvTimeout",
  "EnvViolation",
  "SandboxConfig",
  "SandboxPool",
  "SandboxedEnv",
]

_KIND_ERRORS = {
  "exception": EnvException,
  "contract": EnvContractError,
  "violation": EnvViolation,
}


def _kill_all(workers: list) -> None:
  for w in workers:
    if w is not None and w.dead is None:
      w.kill("pool closed")


class SandboxedEnv:
  """Handle to one environment instance living in a sandboxed worker.

  Results follow docs/DESIGN.md §3.6 with types checked in the worker: observations are str,
  rewards float in [-1, 1], flags bool; `info` comes back JSON-safe (tuples as lists, other
  objects as their repr, at most 32 levels and 1,000 items per level). Not thread-safe: use a
  pool from one thread at a time.
  """

  def __init__(self, pool: SandboxPool, worker: WorkerProcess, env_id: int, class_name: str):
    self.pool, self.worker, self.id, self.class_name = pool, worker, env_id, class_name
    self.dead: str | None = None

  @property
  def alive(self) -> bool:
    return self.dead is None and self.worker.dead is None

  def reset(self, seed: int | None = None, *, timeout: float | None = None) -> tuple[str, dict]:
    return self.pool._one(self, "reset", seed, timeout)

  def step(self, action: str, *, timeout: float | None = None) -> tuple:
    """(observation, reward, terminated, truncated, info)."""
    return self.pool._one(self, "step", action, timeout)

  def solution(self, *, timeout: float | None = None) -> str | list[str]:
    """A game's answer (str), or a tool environment's agent turns (list of str)."""
    return self.pool._one(self, "solution", None, timeout)

  def close(self) -> None:
    self.pool.close_envs([self])


class SandboxPool:
  """A pool of sandboxed workers hosting environment instances; batched calls run in parallel.

  Instances are spread round-robin over `num_workers` workers (started lazily). Batched calls
  (`reset_many`, `step_many`, `call_many`) send one request per worker and return a list
  aligned with the input holding results or `EnvError` instances (never raising for an env's
  failure); single calls on `SandboxedEnv` raise the error instead.
  """

  def __init__(self, num_workers: int = 2, config: SandboxConfig | None = None):
    if num_workers < 1:
      raise ValueError("num_workers must be >= 1")
    self.config = config or SandboxConfig()
    self.workers: list[WorkerProcess | None] = [None] * num_workers
    self._ids = itertools.count()
    self._rr = 0
    self.stats = {"workers_started": 0, "workers_killed": 0}
    self._finalizer = weakref.finalize(self, _kill_all, self.workers)

  # -- lifecycle ---------------------------------------------------------------------------

  def close(self) -> None:
    self._finalizer()

  def __enter__(self) -> SandboxPool:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def live_pids(self) -> list[int]:
    return [w.pid for w in self.workers if w is not None and w.dead is None]

  def _kill(self, w: WorkerProcess, why: str) -> None:
    if w.dead is None:
      self.stats["workers_killed"] += 1
    w.kill(why)

  def _ready_workers(self, timeout: float | None = None) -> list[WorkerProcess]:
    """All slots hold a live, non-retiring worker (started together, in parallel)."""
    if not self._finalizer.alive:
      raise RuntimeError("this SandboxPool is closed")
    fresh = []
    for i, w in enumerate(self.workers):
      if w is not None and w.retiring and not w.envs and w.dead is None:
        self._kill(w, "retired after using half its CPU budget")
      if w is None or w.dead is not None or (w.retiring and not w.envs):
        self.workers[i] = w = WorkerProcess(self.config)
        self.stats["workers_started"] += 1
        fresh.append(w)
    if fresh:
      init = {"op": "init", "config": self.config.worker_config()}
      limit = timeout or self.config.load_timeout
      jobs = {w: ([init], [(("init", w.pid), limit)]) for w in fresh}
      for (_, pid), res in self._exchange(jobs).items():
        if isinstance(res, EnvError):
          raise EnvCrashed(f"sandbox worker {pid} failed to start: {res.reason}")
        next(w for w in fresh if w.pid == pid).layers = res
    return [w for w in self.workers if not w.retiring] or self.workers

  def layers(self) -> dict:
    """The protection layers in force in the workers (as each worker reported them)."""
    return dict(self._ready_workers()[0].layers)

  # -- loading -----------------------------------------------------------------------------

  def make_env(self, source: str, **kw) -> SandboxedEnv:
    env = self.make_envs(source, 1, **kw)[0]
    if isinstance(env, EnvError):
      raise env
    return env

  def make_envs(
    self,
    source: str,
    n: int,
    *,
    class_name: str | None = None,
    kwargs: dict | None = None,
    static_check: bool = True,
    timeout: float | None = None,
  ) -> list[SandboxedEnv | EnvError]:
    """Loads `n` independent instances of the env in `source` (each in its own namespace)."""
    if static_check:
      issue, class_name = sandbox_policy.check_source(source)
      if issue is not None:
        raise EnvViolation(f"static check failed: {issue}")
    workers = self._ready_workers(timeout)
    jobs: dict[WorkerProcess, tuple[list, list]] = {}
    placed = []
    for _ in range(n):
      w = workers[self._rr % len(workers)]
      self._rr += 1
      env_id = next(self._ids)
      req = {"op": "load", "id": env_id, "source": source, "class_name": class_name}
      req["kwargs"] = kwargs or {}
      reqs, expect = jobs.setdefault(w, ([], []))
      reqs.append(req)
      expect.append((env_id, timeout or self.config.load_timeout))
      placed.append((w, env_id))
    results = self._exchange(jobs)
    out = []
    for w, env_id in placed:
      res = results[env_id]
      if not isinstance(res, EnvError):
        w.envs.add(env_id)
        res = SandboxedEnv(self, w, env_id, res)
      out.append(res)
    return out

  def close_envs(self, envs: list[SandboxedEnv]) -> None:
    """Frees the instances in their workers (one request per worker)."""
    ids: dict[WorkerProcess, list[int]] = {}
    for e in envs:
      e.dead = e.dead or "closed"
      if e.worker.dead is None and e.id in e.worker.envs:
        e.worker.envs.discard(e.id)
        ids.setdefault(e.worker, []).append(e.id)
    timeout = self.config.call_timeout
    self._exchange(
      {w: ([{"op": "drop", "ids": i}], [(("drop", w.pid), timeout)]) for w, i in ids.items()}
    )

  # -- calls -------------------------------------------------------------------------------

  def call_many(
    self, envs: list[SandboxedEnv], method: str, args: list, timeout: float | None = None
  ) -> list:
    """Runs `method(arg)` on each env, one request per worker, all workers in parallel."""
    if len(envs) != len(args):
      raise ValueError("envs and args must have the same length")
    timeout = timeout or self.config.call_timeout
    out: list = [None] * len(envs)
    jobs: dict[WorkerProcess, tuple[list, list]] = {}
    for k, (e, a) in enumerate(zip(envs, args)):
      if e.dead is not None:
        out[k] = EnvCrashed(f"environment is gone: {e.dead}")
      elif e.worker.dead is not None:
        out[k] = EnvCrashed(f"its worker was replaced: {e.worker.dead}", collateral=True)
      else:
        reqs, expect = jobs.setdefault(e.worker, ([{"op": "batch", "items": []}], []))
        reqs[0]["items"].append({"id": e.id, "method": method, "arg": a})
        expect.append((k, timeout))
    for k, res in self._exchange(jobs).items():
      if isinstance(res, EnvError):
        if not res.collateral and not isinstance(res, EnvException | EnvContractError):
          envs[k].dead = res.reason
      elif method == "step":
        res = tuple(res)
      elif method == "reset":
        res = (res[0], res[1])
      out[k] = res
    return out

  def reset_many(self, envs, seeds, timeout=None) -> list:
    return self.call_many(envs, "reset", list(seeds), timeout)

  def step_many(self, envs, actions, timeout=None) -> list:
    return self.call_many(envs, "step", list(actions), timeout)

  def _one(self, env: SandboxedEnv, method: str, arg, timeout):
    res = self.call_many([env], method, [arg], timeout)[0]
    if isinstance(res, EnvError):
      raise res
    return res

  # -- the I/O loop ------------------------------------------------------------------------

  def _exchange(self, jobs: dict[WorkerProcess, tuple[list, list]]) -> dict:
    """Sends each worker its requests and collects one reply per expected key.

    `jobs[w] = (requests, [(key, timeout), ...])`. Writing and reading are multiplexed with
    poll, so neither side can block the other on a full pipe. The timeout of an expected
    reply counts from the previous reply of the same worker (the worker serves requests one
    at a time). On timeout, death, oversized output or a violation the worker is killed; the
    failing key gets the error and the keys still queued behind it get collateral errors.
    """
    results: dict = {}
    active = {}
    now = time.monotonic()
    for w, (reqs, expect) in jobs.items():
      if not expect:
        continue
      w.out = b"".join(sandbox_protocol.encode(r) for r in reqs)
      active[w] = [list(expect), now]

    def fail(w: WorkerProcess, err: EnvError) -> None:
      expect = active.pop(w)[0]
      results[expect[0][0]] = err
      for key, _ in expect[1:]:
        results[key] = EnvCrashed(f"its worker was killed: {err.reason}", collateral=True)
      self._kill(w, err.reason)

    while active:
      now = time.monotonic()
      for w, (expect, since) in list(active.items()):
        if now > since + expect[0][1]:
          fail(w, EnvTimeout(f"timed out after {expect[0][1]:g} s"))
      if not active:
        break
      wait = min(since + expect[0][1] for expect, since in active.values()) - now
      poller = select.poll()
      by_fd = {}
      for w in active:
        poller.register(w.rfd, select.POLLIN)
        by_fd[w.rfd] = w
        if w.out:
          poller.register(w.wfd, select.POLLOUT)
          by_fd[w.wfd] = w
      for fd, _ in poller.poll(max(0, int(wait * 1000) + 1)):
        w = by_fd[fd]
        if w not in active:
          continue
        if fd == w.wfd:
          try:
            w.out = w.out[os.write(fd, w.out[: 1 << 16]) :]
          except BlockingIOError:
            pass
          except OSError:
            w.out = b""  # broken pipe: the EOF on its stdout reports the death
          continue
        try:
          data = os.read(fd, 1 << 16)
        except BlockingIOError:
          continue
        if not data:
          fail(w, w.death_error())
          continue
        w.frames.feed(data)
        self._drain(w, active, results, fail)
    return results

  def _drain(self, w: WorkerProcess, active: dict, results: dict, fail) -> None:
    while w in active:
      try:
        body = w.frames.next_frame()
        if body is None:
          return
        reply = sandbox_protocol.decode(body)
      except ValueError as e:
        fail(w, EnvViolation(f"worker output rejected: {e}"))
        return
      w.cpu = float(reply.get("cpu", w.cpu))
      if w.cpu > self.config.cpu_seconds / 2:
        w.retiring = True
      entry = active[w]
      key = entry[0][0][0]
      if reply.get("ok"):
        results[key] = reply.get("value")
      else:
        err = _KIND_ERRORS.get(reply.get("kind"), EnvCrashed)(str(reply.get("reason", "")))
        if isinstance(err, EnvViolation):
          fail(w, err)
          return
        results[key] = err
      entry[0].pop(0)
      entry[1] = time.monotonic()
      if not entry[0]:
        del active[w]
