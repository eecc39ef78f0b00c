"""Multi-host runs (`spade_jax.multihost`, `experiments/run.py --coordinator_address ...`).

The end-to-end test runs the scripted-designer SPADE loop of test_loop.py (the real sampler,
sandbox validation, hint writing, on-device and host plays, the GRPO update, checkpoints,
in-loop evaluation) on a data=2 x fsdp=4 mesh as 1 process x 8 devices, then as 2 processes x
4 CPU devices on localhost (gloo cross-process collectives) through `experiments/run.py
--coordinator_address ...`, SIGKILLed inside step 1 once step 0 is checkpointed and rerun: the
rerun resumes from the 2-process checkpoint, and the metrics and records equal the 1-process
run's. The data axis spans the processes, so the sampler's decode state is split between
them and its host reads go through `multihost.to_host` (with `jax.device_get` this run fails).
The tiny front end (`tiny.py:smoke`) runs as 2 processes too: the same one-device program on
one device of each, equal to the one-process golden file, and resumed from its checkpoint.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_loop
from hf_fixtures import save_hf_model, tiny_tokenizer_dir
from jax.sharding import NamedSharding, PartitionSpec

from spade_jax import metrics, multihost, sharding, train

ROOT = Path(__file__).resolve().parents[1]
DRIVER = str(Path(__file__).parent / "multihost_driver.py")
MESH = (2, 4, 1)  # data x fsdp x tensor: data across the processes, fsdp within each


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def launch(policy_dirs, workdir: Path, kill_after: str | None = None) -> None:
  """The driver as 2 processes of 4 CPU devices each; raises with the logs' tails if one fails.
  With ``kill_after``, both are SIGKILLed a second after ``workdir / kill_after`` appears."""
  args = [DRIVER, *policy_dirs, f"--workdir={workdir}", f"--config.mesh.shape={MESH}"]
  launch_args(args, workdir, kill_after)


def launch_args(
  args: list[str], workdir: Path, kill_after: str | None = None, timeout: float = 400
) -> None:
  """``python ARGS --num_processes=2 --process_id=I --coordinator_address=...`` as 2 processes
  of 4 CPU devices each, as `launch` says, killed after ``timeout`` seconds."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
  base = [sys.executable, *args, "--num_processes=2"]
  base += [f"--coordinator_address=localhost:{free_port()}"]
  logs = [workdir.parent / f"{workdir.name}.{i}.log" for i in range(2)]
  procs = []
  for i, path in enumerate(logs):
    with path.open("a") as log:
      procs.append(
        subprocess.Popen(
          base + [f"--process_id={i}"],
          env=env,
          stdout=log,
          stderr=subprocess.STDOUT,
          cwd=ROOT,
          start_new_session=True,
        )
      )
  deadline, killed = time.monotonic() + timeout, False
  try:
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
      if kill_after and (workdir / kill_after).exists():
        time.sleep(1.0)
        killed = all(p.poll() is None for p in procs)  # else: it ended before, or crashed
        for p in procs:
          os.killpg(p.pid, signal.SIGKILL)
        break
      time.sleep(0.2)
  finally:
    for p in procs:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
      p.wait()
  tails = "\n".join(f"--- process {i}:\n{p.read_text()[-3000:]}" for i, p in enumerate(logs))
  if kill_after:
    assert killed, f"not killed once {kill_after} appeared\n{tails}"
  else:
    assert [p.returncode for p in procs] == [0, 0], tails


def same(a, b) -> bool:
  """Equal, or floats one or two float32 roundings apart (a sum over the processes' shards
  is added up in another order than over one process's devices)."""
  if isinstance(a, float) and isinstance(b, float):
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))
  return a == b


def comparable(workdir: Path) -> list[dict]:
  return [
    {k: v for k, v in r.items() if not k.startswith("perf/")}
    for r in metrics.read_metrics(workdir / "metrics.jsonl")
  ]


@pytest.fixture(scope="module")
def policy_dirs():
  tok_dir = tiny_tokenizer_dir()
  model_dir, _ = save_hf_model("qwen3", seed=3, vocab_size=512, num_hidden_layers=1)
  return model_dir, tok_dir


def test_two_processes_equal_one_and_resume_from_their_checkpoint(policy_dirs, tmp_path):
  one, two = tmp_path / "one", tmp_path / "two"
  with pytest.MonkeyPatch.context() as mp:  # 1 process x 8 devices: this one (conftest)
    test_loop.install_scripted_designer(mp)
    config = test_loop.tiny_config(*policy_dirs)
    config.mesh.shape = MESH
    train.train(config, one)
  want = comparable(one)
  assert [r["step"] for r in want] == [0, 1] and "eval/accuracy" in want[-1]

  launch(policy_dirs, two, kill_after="checkpoints/1")  # killed inside step 1
  assert [r["step"] for r in metrics.read_metrics(two / "metrics.jsonl")] == [0]
  step0 = (two / "transcripts" / "step000000.jsonl").stat().st_mtime_ns
  launch(policy_dirs, two)  # resumes at step 1 from the 2-process checkpoint
  assert (two / "transcripts" / "step000000.jsonl").stat().st_mtime_ns == step0
  got = comparable(two)  # one row per step: process 1 wrote no metrics
  assert [r["step"] for r in got] == [0, 1]
  for g, w in zip(got, want):  # the same numbers up to the order of cross-process float sums
    diff = {k: (g.get(k), w.get(k)) for k in set(g) | set(w) if not same(g.get(k), w.get(k))}
    assert not diff, f"step {w['step']}: (2 processes, 1 process) {diff}"
  for sub in ("envs", "transcripts", "eval"):  # the same records, written once
    files = sorted(p.relative_to(one) for p in (one / sub).rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in (two / sub).rglob("*") if p.is_file())
    assert files, sub
  for name in ("transcripts/step000001.jsonl", "eval/2/rg.jsonl"):
    assert (two / name).read_text() == (one / name).read_text()
  assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["1", "2"]


def run_py(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  cmd = [sys.executable, "experiments/run.py", *args]
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
  "flags,needle",
  [
    (["--num_processes=2"], "go together (got only --num_processes)"),
    (["--coordinator_address=localhost", "--num_processes=2", "--process_id=0"], "HOST:PORT"),
    (["--coordinator_address=h:99999", "--num_processes=2", "--process_id=0"], "HOST:PORT"),
    (["--coordinator_address=h:1234", "--num_processes=0", "--process_id=0"], ">= 1"),
    (["--coordinator_address=h:1234", "--num_processes=2", "--process_id=2"], "[0, 2)"),
    (["--num_processes=two"], "num_processes"),
  ],
)
def test_bad_distributed_flags_exit_2_with_one_line(tmp_path, flags, needle):
  res = run_py("--config=experiments/configs/tiny.py:smoke", f"--workdir={tmp_path}", *flags)
  assert res.returncode == 2, res.stderr[-2000:]
  lines = [ln for ln in res.stderr.strip().splitlines() if ln.startswith("error:")]
  assert len(lines) == 1 and needle in lines[0], res.stderr[-2000:]
  assert not (tmp_path / "config.json").exists()


def test_check_args():
  assert multihost.check_args(None, None, None) is None
  assert multihost.check_args("10.0.0.1:1234", 4, 3) == dict(
    coordinator_address="10.0.0.1:1234", num_processes=4, process_id=3
  )
  with pytest.raises(ValueError, match="go together"):
    multihost.check_args("h:1", None, 0)


def test_to_host_in_one_process_is_device_get():
  """Every array of a one-process run is addressable: `to_host` copies as `jax.device_get`
  does, whatever the sharding, and passes other leaves through."""
  mesh = sharding.make_mesh((2, 4, 1))
  x = jnp.arange(64.0).reshape(8, 8)
  tree = {
    "sharded": jax.device_put(x, NamedSharding(mesh, PartitionSpec(("data", "fsdp")))),
    "replicated": jax.device_put(x, NamedSharding(mesh, PartitionSpec())),
    "scalar": jnp.float32(2.5),
    "host": np.ones(3),
    "number": 7,
  }
  got, want = multihost.to_host(tree), jax.device_get(tree)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for k in tree:
    assert type(got[k]) is type(want[k]), k
    np.testing.assert_array_equal(got[k], want[k])
  np.testing.assert_array_equal(got["sharded"], np.arange(64.0).reshape(8, 8))


def test_tiny_two_processes_equal_the_golden_smoke_and_resume(tmp_path):
  """`tiny.py:smoke` as 2 processes x 4 devices (the same one-device program on one device of
  each), SIGKILLed inside step 1 once step 0 is checkpointed and rerun: the rerun resumes from
  the 2-process checkpoint, and the warm start and every step equal the one-process golden file
  (tests/golden/tiny_smoke_metrics.jsonl, test_tiny_train.py) exactly; process 0 alone wrote
  the records."""
  import test_tiny_train

  run = tmp_path / "run"
  args = ["experiments/run.py", test_tiny_train.SMOKE, f"--workdir={run}"]
  # each launch compiles one of the two iteration programs (regeneration at steps 0 and 2,
  # replay at step 1) and loads the other from the persistent cache
  launch_args(args, run, kill_after="checkpoints/1", timeout=600)  # killed inside step 1
  assert [r["step"] for r in metrics.read_metrics(run / "metrics.jsonl")] == [0]
  warm = (run / "warm_start.json").stat().st_mtime_ns
  launch_args(args, run, timeout=600)  # resumes at step 1: no second warm start
  assert (run / "warm_start.json").stat().st_mtime_ns == warm
  rows = test_tiny_train.golden_rows(run)
  golden = [json.loads(x) for x in test_tiny_train.GOLDEN.read_text().splitlines()]
  assert len(rows) == len(golden)
  for got, want in zip(rows, golden):
    diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert not diff, f"step {want['step']}: (2 processes, golden) {diff}"
  assert sorted(p.name for p in (run / "eval").iterdir()) == [
    f"step{s:06d}.jsonl" for s in (0, 2, 3)
  ]
  assert len(list((run / "envs").iterdir())) > 0


SHARE_SCRIPT = """
import json, sys
import jax
jax.distributed.initialize(coordinator_address=sys.argv[1], num_processes=2,
                           process_id=int(sys.argv[2]))
from spade_jax import multihost
done = []
def work(x):
  done.append(x)
  return {"square": x * x, "text": "x" * x}
out = multihost.shared_map(work, list(range(7)))
parts = multihost.allgather_objects({"process": jax.process_index(), "done": done})
print(json.dumps({"out": out, "done": done, "parts": parts}))
"""


def test_shared_map_splits_work_between_processes_and_gathers_it(tmp_path):
  """Each of 2 processes computes only the items it `owns` (i % 2 == its index) and both end
  with every result, in order; `allgather_objects` returns each process's value in order."""
  address = f"localhost:{free_port()}"
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
  procs = [
    subprocess.Popen(
      [sys.executable, "-c", SHARE_SCRIPT, address, str(i)],
      env=env,
      cwd=ROOT,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  outs = [p.communicate(timeout=240) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-2000:]

  results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
  expected = [{"square": x * x, "text": "x" * x} for x in range(7)]
  for i, r in enumerate(results):
    assert r["out"] == expected
    assert r["done"] == [x for x in range(7) if x % 2 == i]
    assert r["parts"] == [
      {"process": p, "done": [x for x in range(7) if x % 2 == p]} for p in range(2)
    ]


def test_shared_map_in_one_process_maps_everything():
  assert multihost.owns(3) and multihost.owns(0)
  assert multihost.shared_map(lambda x: x + 1, [1, 2, 3]) == [2, 3, 4]
  assert multihost.allgather_objects({"a": 1}) == [{"a": 1}]
