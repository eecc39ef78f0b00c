"""Compiling a tiny run's big programs in a child process while the warm start runs.

The first steps of a fresh tiny run used to wait on XLA: the regeneration and replay variants of
`iteration.iterate` and the held-out evaluation's rollout are the run's largest programs, and
on a 2-core CPU they take minutes to compile. None of them depends on the warm start's
*values*, only on shapes, dtypes and placements, which are known before it starts. So
`train_tiny` starts this module as a child process (``python -m spade_jax.tiny.compile_ahead
WORKDIR``) before the warm start; the child rebuilds the run's setup from
``WORKDIR/config.json``, lowers both iteration variants from `jax.ShapeDtypeStruct`s of the
placed state, carry and step inputs, compiles them and one held-out evaluation into the
persistent compilation cache, and exits. After the warm start the run waits for the child, and
its own jitted calls then load those executables from the cache instead of compiling them.

A child process rather than a thread: compiling on a thread of the run's own process overlapped
the Python tracing of both (one GIL), and a run with such a thread once aborted inside jax's
cache write. The keys match because the run commits its state, carry
and inputs to one device (`setup.place`), as the child does (tests/test_tiny_compile_ahead.py
compares the cache keys of both sides).

The cache is the user's (``jax_compilation_cache_dir`` / ``JAX_COMPILATION_CACHE_DIR``) or,
when none is set, ``WORKDIR/compile_cache``, which also makes a resumed run load its programs
instead of compiling them again. The child's report (seconds per program, cache keys, its
exit status) is ``WORKDIR/compile_ahead.json``. A failed or mismatched child costs only time:
the run then compiles in its own process as before.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import jax

REPORT = "compile_ahead.json"
_LOGGER = "jax._src.compiler"  # logs each persistent-cache hit / miss with its key


def cache_dir(workdir) -> str:
  """The persistent compilation cache of a tiny run: the one configured, else (set here, for
  this process and the child) ``workdir/compile_cache``."""
  current = jax.config.jax_compilation_cache_dir
  if current:
    return current
  path = str(Path(workdir).resolve() / "compile_cache")
  jax.config.update("jax_compilation_cache_dir", path)
  return path


class CacheKeys(logging.Handler):
  """Collects ``{module name: [cache key, ...]}`` from jax's persistent-cache hit/miss log lines
  while attached (`attach` / `detach`)."""

  def __init__(self):
    super().__init__(logging.DEBUG)
    self.keys: dict[str, list[str]] = {}
    self._level = None

  def emit(self, record):
    msg = record.getMessage()
    if msg.lower().startswith("persistent compilation cache") and " with key " in msg:
      name = msg.split("'")[1]
      key = msg.rsplit(" with key ", 1)[1].strip("'\"")
      self.keys.setdefault(name, []).append(key)

  def attach(self):
    log = logging.getLogger(_LOGGER)
    self._level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(self)
    return self

  def detach(self):
    log = logging.getLogger(_LOGGER)
    log.removeHandler(self)
    log.setLevel(self._level)


class AheadOfTime:
  """The child process of one run (`start`), joined by `wait`."""

  def __init__(self, workdir):
    self.workdir = Path(workdir).resolve()
    self.cache = cache_dir(self.workdir)
    self.log = open(self.workdir / "compile_ahead.log", "w")  # noqa: SIM115 (closed in wait)
    self.t0 = time.perf_counter()
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=self.cache)
    self.proc = subprocess.Popen(
      [sys.executable, "-m", "spade_jax.tiny.compile_ahead", str(self.workdir)],
      env=env,
      stdout=self.log,
      stderr=subprocess.STDOUT,
      cwd=str(Path(__file__).resolve().parents[2]),
    )

  def wait(self) -> dict:
    """Waits for the child; returns its report (``{"ok": False, ...}`` if it failed, and the
    run then compiles in its own process)."""
    rc = self.proc.wait()
    self.log.close()
    waited = time.perf_counter() - self.t0
    path = self.workdir / REPORT
    report = json.loads(path.read_text()) if rc == 0 and path.exists() else {}
    report.update(ok=rc == 0, returncode=rc, wall_s=waited)
    path.write_text(json.dumps(report, indent=1))
    if rc != 0:
      tail = (self.workdir / "compile_ahead.log").read_text()[-2000:]
      print(f"compile_ahead: child failed ({rc}); compiling in-process.\n{tail}", file=sys.stderr)
    return report

  def kill(self) -> None:
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()
    if not self.log.closed:
      self.log.close()


def abstract(tree):
  """``tree``'s arrays as `jax.ShapeDtypeStruct`s (shape, dtype, sharding, weak type)."""
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=x.weak_type),
    tree,
  )


def compile_run(workdir) -> dict:
  """The child's work: compiles the run's iteration variants and one held-out evaluation into
  the persistent cache; returns ``{"programs": {name: seconds}, "keys": {module: [key]}}``."""
  from spade_jax.tiny import iteration
  from spade_jax.tiny.config import load_run_config, typed_config
  from spade_jax.tiny.heldout import TinyHeldout
  from spade_jax.tiny.setup import TinySetup, place

  keys = CacheKeys().attach()
  try:
    config = typed_config(load_run_config(workdir))
    setup = TinySetup(config)
    graphdef, state, carry = setup.init_state()
    state, carry = place((state, carry))
    programs = {}
    W = config.spade.regen_interval
    variants = [(True, 0)] + ([(False, 1)] if W > 1 and config.steps > 1 else [])
    for regen, step in variants:
      t = time.perf_counter()
      args = abstract((state, carry, place(setup.inputs(step, None))))
      iteration.iterate.lower(graphdef, *args, spec=setup.spec, regen=regen).compile()
      programs[f"iterate/regen={regen}"] = time.perf_counter() - t
    if config.eval.every:
      t = time.perf_counter()
      heldout = TinyHeldout(
        graphdef,
        state.params,
        setup.tok,
        setup.framing,
        setup.library,
        config,
        spec=setup.rollout_spec,
      )
      heldout.evaluate(state.params)
      programs["eval"] = time.perf_counter() - t
  finally:
    keys.detach()
  return {"programs": programs, "keys": keys.keys}


def main(argv: list[str]) -> int:
  (workdir,) = argv
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  report = compile_run(workdir)
  (Path(workdir) / REPORT).write_text(json.dumps(report, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
