"""The tiny run's ahead-of-time compile in a child process (`spade_jax.tiny.compile_ahead`): the
child's executables are the ones the run's own jitted calls look up, and a failed child costs
the run nothing but time."""

import json
import sys
from pathlib import Path

import jax
import pytest

from spade_jax import metrics
from spade_jax.tiny import compile_ahead
from spade_jax.tiny.train import train_tiny

REPO = Path(__file__).resolve().parents[1]


def smoke_config():
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  c = tiny.get_config("smoke")
  c.compile_ahead = True
  return c


def test_child_compiles_what_the_run_looks_up(tmp_path):
  workdir = tmp_path / "run"
  # Programs already compiled in this process (other tests' runs of the same shapes) are not
  # looked up in the persistent cache again: start from empty in-memory caches.
  jax.clear_caches()
  keys = compile_ahead.CacheKeys().attach()  # the run's own persistent-cache lookups
  try:
    train_tiny(smoke_config(), workdir)
  finally:
    keys.detach()
  report = json.loads((workdir / compile_ahead.REPORT).read_text())
  assert report["ok"] and report["returncode"] == 0
  assert set(report["programs"]) == {"iterate/regen=True", "iterate/regen=False", "eval"}
  child = {k for v in report["keys"].values() for k in v}
  run = {k for v in keys.keys.values() for k in v}
  iterate = keys.keys.get("jit_iterate", [])
  assert len(set(iterate)) == 2, keys.keys  # both variants, looked up by the run
  assert set(iterate) <= child, "the run's iteration keys differ from the child's"
  child_eval = set(report["keys"]) - {"jit_iterate"}
  assert child_eval, report["keys"]
  for name in child_eval:  # the held-out evaluation's program(s): the run looks them up too
    assert set(report["keys"][name]) <= run, name
  warm = json.loads((workdir / "warm_start.json").read_text())
  assert warm["perf/compile_ahead_ok"] is True
  assert [r["step"] for r in metrics.read_metrics(workdir / "metrics.jsonl")] == [0, 1, 2]


def test_failed_child_is_reported_not_fatal(tmp_path, capsys):
  ahead = compile_ahead.AheadOfTime(tmp_path)  # no config.json there: the child fails
  report = ahead.wait()
  ahead.kill()
  assert report["ok"] is False and report["returncode"] != 0
  assert json.loads((tmp_path / compile_ahead.REPORT).read_text())["ok"] is False
  assert "compiling in-process" in capsys.readouterr().err


def test_cache_dir_is_the_users_else_the_workdirs(tmp_path, monkeypatch):
  configured = jax.config.jax_compilation_cache_dir
  assert configured  # tests/conftest.py sets one for the session
  assert compile_ahead.cache_dir(tmp_path) == configured
  try:
    jax.config.update("jax_compilation_cache_dir", None)
    assert compile_ahead.cache_dir(tmp_path) == str(tmp_path.resolve() / "compile_cache")
    assert jax.config.jax_compilation_cache_dir == str(tmp_path.resolve() / "compile_cache")
  finally:
    jax.config.update("jax_compilation_cache_dir", configured)


@pytest.mark.parametrize("weak", [False, True])
def test_abstract_keeps_sharding_and_weak_type(weak):
  x = jax.device_put(jax.numpy.asarray(1.0) if weak else jax.numpy.ones(3), jax.devices()[0])
  a = compile_ahead.abstract({"x": x})["x"]
  assert (a.shape, a.dtype, a.sharding, a.weak_type) == (x.shape, x.dtype, x.sharding, weak)
