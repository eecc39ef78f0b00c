"""The validator: every fixture (valid, invalid, hostile) judged as its docstring says, in one
module; extraction and f-string repair; timeouts; hostile runs leave nothing behind.

Each fixture's first line is a docstring; invalid and hostile ones end it with
`Expect: STAGE | REASON-SUBSTRING`, which this module asserts.
"""

import os
import re
import time
from pathlib import Path

import pytest

from spade_jax.envs.library import FAMILIES
from spade_jax.envs.sandbox.pool import SandboxConfig
from spade_jax.envs.sandbox.process import WORKER_SCRIPT
from spade_jax.envs.sandbox.validate import (
  STAGES,
  ValidatorConfig,
  dependence_failure,
  extract_code,
  repair_fstrings,
  validate,
)

FIXTURES = Path(__file__).parent / "fixtures" / "envs"
ALL = sorted(FIXTURES.glob("*/*.py"))
EXPECT = re.compile(r"Expect: (\w+) \| (.+?)\"\"\"$")


def expectation(path: Path) -> tuple[str, str]:
  first = path.read_text().splitlines()[0]
  assert first.startswith('"""') and first.endswith('"""'), f"{path.name}: one-line docstring"
  m = EXPECT.search(first)
  if path.parent.name == "valid":
    assert m is None
    return "ok", ""
  assert m is not None, f"{path.name} must say 'Expect: STAGE | REASON'"
  assert m.group(1) in STAGES
  return m.group(1), m.group(2)


@pytest.fixture(scope="module")
def scratch_root(tmp_path_factory):
  root = tmp_path_factory.mktemp("sandbox_scratch")
  os.chmod(root, 0o755)
  return root


@pytest.fixture(scope="module")
def verdicts(scratch_root):
  """Validates every fixture once (short timeouts so the slow ones cost ~2 s each)."""
  for stale in Path("/tmp").glob("spade_jax_hostile_*"):
    stale.unlink()
  sandbox = SandboxConfig(
    load_timeout=2.0, call_timeout=2.0, memory_bytes=256 * 2**20, scratch_root=str(scratch_root)
  )
  config = ValidatorConfig(total_timeout=30.0, sandbox=sandbox)
  out = {"__before__": _process_state()}
  t = time.monotonic()
  for path in ALL:
    out[path.name] = validate(path.read_text(), config)
  out["__seconds__"] = time.monotonic() - t
  return out


def test_corpus_has_every_category():
  kinds = {p.parent.name for p in ALL}
  assert kinds == {"valid", "invalid", "hostile"}
  assert sum(p.parent.name == "hostile" for p in ALL) >= 20
  assert sum(p.parent.name == "invalid" for p in ALL) >= 15


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_verdict(path, verdicts):
  stage, reason = expectation(path)
  report = verdicts[path.name]
  assert (report.stage, report.valid) == (stage, stage == "ok"), report.reason
  assert reason in report.reason, report.reason
  if stage in ("extract", "static"):
    assert report.sandbox_layers == {}  # rejected before any code ran
  else:
    assert report.class_name and report.class_name.endswith("Env")
    assert report.sandbox_layers["audit_hook"] == "on"
  if report.valid:
    assert report.seeds == list(range(8)) and report.reason == ""
    assert set(report.timings) == {"extract", "static", *STAGES[2:], "total"}


def test_hostile_runs_leave_nothing_behind(verdicts, scratch_root):
  hostile = [p.name for p in ALL if p.parent.name == "hostile"]
  assert all(not verdicts[name].valid for name in hostile)
  assert list(Path("/tmp").glob("spade_jax_hostile_*")) == []  # no file escaped
  assert os.listdir(scratch_root) == []  # every worker's scratch dir removed
  me = str(os.getpid())
  workers = []
  for entry in os.listdir("/proc"):
    try:
      stat = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()
      cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
    except (OSError, IndexError):
      continue
    if stat[1] == me and WORKER_SCRIPT.encode() in cmd:
      workers.append(entry)
  assert workers == []  # no worker outlived its validation
  assert verdicts["__seconds__"] < 150


def _process_state() -> tuple:
  env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
  return os.getcwd(), env, len(os.listdir("/proc/self/fd")), os.getpgrp()


def test_calling_process_is_healthy_after_the_corpus(verdicts, scratch_root):
  assert _process_state() == verdicts["__before__"]
  source = (FIXTURES / "valid" / "v01_guess_number.py").read_text()
  report = validate(source, ValidatorConfig(sandbox=SandboxConfig(scratch_root=str(scratch_root))))
  assert report.valid and report.stage == "ok"


def test_report_fields(verdicts):
  report = verdicts["v15_fstring_repair.py"]
  assert report.repairs == ["line 16: escaped {answer} in an f-string"]
  assert "\\\\boxed{{answer}}" in report.source
  d = report.to_dict()
  assert set(d) >= {"valid", "stage", "reason", "timings", "seeds", "source", "class_name"}
  bad = verdicts["i17_infeasible_solution.py"]
  assert bad.class_name == "OffByOneEnv" and "seed 0" in bad.reason


def test_total_timeout_is_enforced(scratch_root):
  slow = (
    (FIXTURES / "valid" / "v01_guess_number.py")
    .read_text()
    .replace("    self.turn += 1\n", "    self.turn += 1\n    sum(range(10**7))\n")
  )
  sandbox = SandboxConfig(call_timeout=5.0, load_timeout=5.0, scratch_root=str(scratch_root))
  t = time.monotonic()
  report = validate(slow, ValidatorConfig(total_timeout=1.0, sandbox=sandbox))
  assert time.monotonic() - t < 6
  assert not report.valid and report.stage in ("contract", "feasibility")
  assert "timed out" in report.reason and "total time limit" in report.reason


# -- dependence ----------------------------------------------------------------------------


def test_dependence_verdict():
  obs = {s: f"task {s}" for s in range(8)}
  why = dependence_failure({s: " 7 " for s in range(8)}, obs)
  assert why.startswith("the solution is '7' on all 8 probed seeds") and "8 distinct" in why
  assert dependence_failure({s: str(s % 2) for s in range(8)}, obs) is None  # yes/no varies
  assert dependence_failure({s: "7" for s in range(8)}, dict.fromkeys(range(8), "same")) is None


SKEWED = """import random
import re


class RoundTenEnv:
  def __init__(self, **kw):
    self.reset()

  def reset(self, seed=None):
    self.n = random.Random(seed).randint(1, 100)
    return f"Is {self.n} a multiple of 11? Answer \\\\boxed{{yes}} or \\\\boxed{{no}}.", {}

  def solution(self):
    return "yes" if self.n % 11 == 0 else "no"

  def step(self, action):
    ok = f"\\\\boxed{{{self.solution()}}}" in action
    return ("Right." if ok else "Wrong."), float(ok), ok, not ok, {}
"""


def test_skewed_yes_no_is_probed_past_the_validation_seeds(scratch_root):
  """A yes/no answer, "yes" on ~9% of seeds and "no" on all 8 validation seeds: the stage
  probes on (and finds a "yes") instead of calling the answer task-independent."""
  sandbox = SandboxConfig(scratch_root=str(scratch_root))
  report = validate(SKEWED, ValidatorConfig(sandbox=sandbox))
  assert report.valid, report.reason
  constant = SKEWED.replace('"yes" if self.n % 11 == 0 else "no"', '"no"')
  report = validate(constant, ValidatorConfig(sandbox=sandbox))
  assert report.stage == "dependence" and "on all 64 probed seeds" in report.reason


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_library_twins_pass_validation(name, scratch_root):
  sandbox = SandboxConfig(scratch_root=str(scratch_root))
  report = validate(FAMILIES[name].twin_source(), ValidatorConfig(sandbox=sandbox))
  assert report.valid, (report.stage, report.reason)


# -- extract -------------------------------------------------------------------------------


def test_extract_prefers_the_python_fence():
  text = "Intro\n```text\nnot code\n```\n```python\nx = 1\n```\n```python\ny = 2\n```"
  assert extract_code(text) == "x = 1"
  assert extract_code("Here:\n```\nz = 3\n```\nbye") == "z = 3"
  assert extract_code("\nplain = 4\n") == "plain = 4"


def test_extract_stage_fails_on_empty_text():
  report = validate("```python\n\n```")
  assert (report.stage, report.reason) == ("extract", "no code found in the text")


def test_model_response_is_extracted_and_repaired(scratch_root):
  source = (FIXTURES / "valid" / "v15_fstring_repair.py").read_text()
  response = f"Sure! Here is the environment:\n\n```python\n{source}```\n\nIt is a parity game."
  sandbox = SandboxConfig(scratch_root=str(scratch_root))
  report = validate(response, ValidatorConfig(seeds=(0, 1, 2), sandbox=sandbox))
  assert report.valid, report.reason
  assert report.seeds == [0, 1, 2] and report.source.startswith('"""Valid after')


@pytest.mark.parametrize(
  "code, fixed",
  [
    ('s = f"put it in \\\\boxed{}"', 's = f"put it in \\\\boxed{{}}"'),
    ('s = f"\\\\boxed{your answer}"', 's = f"\\\\boxed{{your answer}}"'),
    ('s = f"\\\\boxed{answer}"', 's = f"\\\\boxed{{answer}}"'),
    ('n = 3\ns = f"{n} and \\\\boxed{n}"', None),  # bound names are real placeholders
    ('s = f"{len(x)} {x!r:>4} {{kept}}"', None),  # expressions, specs, escapes untouched
    ('s = "plain {answer}"', None),  # not an f-string
    ("def f(k):\n  return f'{k}: {nope}'", "def f(k):\n  return f'{k}: {{nope}}'"),
  ],
)
def test_fstring_repair(code, fixed):
  out, notes = repair_fstrings(code)
  assert out == (fixed or code)
  assert bool(notes) == (fixed is not None)
