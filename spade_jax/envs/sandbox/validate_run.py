"""The sandboxed part of one validation, shared by the game stages (sandbox/validate.py) and the
tool stages (sandbox/validate_tool.py): its pool, deadline, running stage and timings, and the
leak verdict both kinds use.

`ValidationRun` owns a one-worker `SandboxPool` (fresh per validation; the caller closes it).
Every call is bounded by the sandbox's per-call limit and by what is left of the validation's
total time; a failure becomes a `StageFailure` naming the stage that was running, with "timed
out" in the reason for a timeout.
"""

from __future__ import annotations

import re
import time

from spade_jax.envs.sandbox.pool import (
  EnvContractError,
  EnvError,
  EnvException,
  EnvTimeout,
  SandboxPool,
)

TINY_ANSWER_CHARS = 2
TINY_DISTINCT = 5


class StageFailure(Exception):
  """The first failing stage of a validation and why."""

  def __init__(self, stage: str, reason: str):
    super().__init__(reason)
    self.stage, self.reason = stage, reason


def boundary_find(needle: str, hay: str) -> bool:
  """Whether `needle` occurs in `hay` as a whole token (not inside a word or number)."""
  return re.search(r"(?<![\w.])" + re.escape(needle) + r"(?![\w.])", hay) is not None


def leak_failure(seeds: list, answers: dict, observations: dict, what: str) -> str | None:
  """The leak stage's verdict: None, or why `answers[s]` (stripped; seeds without one are
  skipped) appears verbatim in `observations[s]` on most seeds. Exempt when the answer space is
  tiny: answers of at most `TINY_ANSWER_CHARS` characters never count, and fewer than
  `TINY_DISTINCT` distinct answers over the seeds exempt all."""
  given = {s: answers[s].strip() for s in seeds if answers.get(s) is not None}
  tiny = len(set(given.values())) < min(TINY_DISTINCT, len(seeds))
  leaked = [
    s for s, a in given.items() if len(a) > TINY_ANSWER_CHARS and boundary_find(a, observations[s])
  ]
  if tiny or len(leaked) * 2 <= len(seeds):
    return None
  s = leaked[0]
  return (
    f"{what} appears verbatim in the first observation on {len(leaked)}/{len(seeds)} "
    f"seeds (seed {s}: {answers[s][:60]!r})"
  )


class ValidationRun:
  """One validation in progress: its pool, deadline, current stage and per-stage timings.

  `config` is a `validate.ValidatorConfig` (seeds, total_timeout, sandbox, ...)."""

  def __init__(self, config, timings: dict):
    self.config = config
    self.timings = timings
    self.started = time.perf_counter()
    self.deadline = time.monotonic() + config.total_timeout
    self.pool = SandboxPool(1, config.sandbox)
    self.stage = "load"
    self.total = f"{config.total_timeout:g} s"

  def begin(self, stage: str) -> None:
    self.stage, self.started = stage, time.perf_counter()

  def end(self) -> None:
    """Records the running stage's time (also called for the stage that failed)."""
    self.timings[self.stage] = time.perf_counter() - self.started

  def fail(self, reason: str) -> StageFailure:
    """A failure of the running stage (to raise)."""
    return StageFailure(self.stage, reason)

  def budget(self, limit: float) -> tuple[float, bool]:
    """(timeout for the next call, whether the total deadline capped it)."""
    left = self.deadline - time.monotonic()
    if left <= 0:
      raise self.fail(f"timed out: validation exceeded its total time limit ({self.total})")
    return min(limit, left), left < limit

  def error(self, what: str, err: EnvError, capped: bool) -> StageFailure:
    if isinstance(err, EnvTimeout) and capped:
      return self.fail(f"{what} timed out: validation exceeded its total time limit ({self.total})")
    if isinstance(err, EnvException | EnvContractError):
      return self.fail(err.reason)
    return self.fail(f"{what}: {err.reason}")

  def make(self, source: str, class_name: str):
    """A new instance (a `SandboxedEnv`) in the run's worker."""
    timeout, capped = self.budget(self.config.sandbox.load_timeout)
    try:
      env = self.pool.make_envs(
        source, 1, class_name=class_name, static_check=False, timeout=timeout
      )[0]
    except EnvError as err:  # the worker itself failed to start
      env = err
    if isinstance(env, EnvError):
      raise self.error(f"{class_name}()", env, capped)
    return env

  def call(self, env, method: str, arg=None):
    """`env.method(arg)` under the per-call and total limits; its result or a StageFailure."""
    what = f"{method}({'' if method == 'solution' else repr(arg)[:60]})"
    timeout, capped = self.budget(self.config.sandbox.call_timeout)
    res = self.pool.call_many([env], method, [arg], timeout)[0]
    if isinstance(res, EnvError):
      raise self.error(what, res, capped)
    return res

  def layers(self) -> dict:
    """The protection layers the run's worker reported ({} if none started)."""
    return dict(next((w.layers for w in self.pool.workers if w), {}))

  def close(self) -> None:
    self.pool.close()
