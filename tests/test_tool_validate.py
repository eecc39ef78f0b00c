"""Tool environments in the sandbox: the static kind check, the worker's ToolEnv support (shared
read-only ToolEnv, solution turns, tamper check), the tool validator on every fixture in
tests/fixtures/tool_envs (valid, invalid, hostile tool bodies), and the check CLI's kind key.

Each fixture's first line is a docstring; invalid and hostile ones end it with
`Expect: STAGE | REASON-SUBSTRING`, which this module asserts.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spade_jax.envs.sandbox import policy
from spade_jax.envs.sandbox.pool import (
  EnvContractError,
  EnvViolation,
  SandboxConfig,
  SandboxPool,
)
from spade_jax.envs.sandbox.process import WORKER_SCRIPT
from spade_jax.envs.sandbox.validate import STAGES, ValidatorConfig, validate
from spade_jax.envs.sandbox.validate_tool import final_answer, tool_probes

FIXTURES = Path(__file__).parent / "fixtures" / "tool_envs"
ALL = sorted(FIXTURES.glob("*/*.py"))
EXPECT = re.compile(r"Expect: (\w+) \| (.+?)\"\"\"$")
VALID = FIXTURES / "valid" / "tv01_stock_lookup.py"
GAME = Path(__file__).parent / "fixtures" / "envs" / "valid" / "v02_arithmetic.py"


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
  root = tmp_path_factory.mktemp("tool_sandbox_scratch")
  os.chmod(root, 0o755)
  return root


def sandbox(scratch_root, **kw) -> SandboxConfig:
  kw = {"load_timeout": 2.0, "call_timeout": 2.0, "memory_bytes": 256 * 2**20} | kw
  return SandboxConfig(scratch_root=str(scratch_root), **kw)


@pytest.fixture(scope="module")
def verdicts(scratch_root):
  """Validates every fixture once (short timeouts so the slow ones cost ~2 s each)."""
  for stale in Path("/tmp").glob("spade_jax_hostile_*"):
    stale.unlink()
  config = ValidatorConfig(total_timeout=30.0, sandbox=sandbox(scratch_root))
  t = time.monotonic()
  out = {path.name: validate(path.read_text(), config) for path in ALL}
  out["__seconds__"] = time.monotonic() - t
  return out


# -- the static check ----------------------------------------------------------------------

TOOL = (FIXTURES / "valid" / "tv01_stock_lookup.py").read_text()


def test_corpus_has_every_category():
  kinds = [p.parent.name for p in ALL]
  assert kinds.count("valid") >= 5 and kinds.count("invalid") >= 12
  assert kinds.count("hostile") >= 12


def test_kind_of_sources():
  assert policy.source_kind(TOOL) == "tool"
  assert policy.source_kind(GAME.read_text()) == "game"
  assert policy.source_kind("def f(:") == "game"  # unparseable: the static stage reports it
  alias = (FIXTURES / "valid" / "tv04_module_alias_base.py").read_text()
  assert policy.check_source_kind(alias) == (None, "ProductEnv", "tool")
  renamed = TOOL.replace("from tool_env import ToolEnv", "from tool_env import ToolEnv as Base")
  renamed = renamed.replace("(ToolEnv)", "(Base)")
  assert policy.check_source_kind(renamed) == (None, "StockLookupEnv", "tool")
  assert policy.check_source(TOOL) == (None, "StockLookupEnv")  # the old callers' shape


def test_a_game_may_import_json_and_tool_env_names():
  src = "import json\nfrom tool_env import parse_answer\n\n" + GAME.read_text()
  assert policy.check_source_kind(src)[::2] == (None, "game")


@pytest.mark.parametrize(
  "old, new, reason",
  [
    (
      "  def solution(self):",
      "  def step(self, action):\n    return 'o', 1.0, True, False, {}\n\n  def solution(self):",
      "tool environment class StockLookupEnv must not override step()",
    ),
    ("  def solution(self):", "  def answer(self):", "has no method solution()"),
    ("def reset(self, seed=None):", "def reset(self):", "must be callable as reset(self, seed)"),
    ("    calls = [", "    ToolEnv.step = max\n    calls = [", "modifying imported module object"),
    ("from tool_env import ToolEnv", "from tool_env import _wrap_reset, ToolEnv", "private name"),
  ],
)
def test_tool_shape_rejections(old, new, reason):
  assert old in TOOL
  issue, cls, kind = policy.check_source_kind(TOOL.replace(old, new))
  assert issue is not None and reason in issue.reason and cls is None and kind == "tool", issue


def test_step_override_through_a_local_base_is_rejected_with_its_line():
  src = TOOL.replace(
    "class StockLookupEnv(ToolEnv):",
    "class Base(ToolEnv):\n  def step(self, action):\n    return super().step(action)\n\n\n"
    "class StockLookupEnv(Base):",
  )
  issue, _, kind = policy.check_source_kind(src)
  assert kind == "tool" and "must not override step()" in issue.reason
  assert src.splitlines()[issue.line - 1].strip() == "def step(self, action):"


# -- the worker ----------------------------------------------------------------------------


def test_worker_serves_tool_envs(scratch_root):
  with SandboxPool(1, sandbox(scratch_root)) as pool:
    env, other = pool.make_envs(TOOL, 2, static_check=False)  # class found without a name
    assert env.class_name == "StockLookupEnv"
    obs, info = env.reset(3)
    assert info["tool_problems"] == [] and info["instructions"] == 0
    params = info["tools"][0]["function"]["parameters"]  # nested schemas survive as data
    assert params["properties"]["item"] == {"type": "string", "description": "the item name"}
    turns = env.solution()
    assert isinstance(turns, list) and all(isinstance(t, str) for t in turns)
    for turn in turns:
      out = env.step(turn)
    assert out[1:3] == (1.0, True)
    assert other.reset(3) == (obs, info)


@pytest.mark.parametrize(
  "solution, reason",
  [
    ('"<answer>1</answer>"', "must return a list of agent turns (str), got str"),
    ("[]", "solution() returned 0 turns (need 1..64)"),
    ('["<answer>1</answer>"] * 65', "solution() returned 65 turns (need 1..64)"),
    ('["ok", 3]', "solution() turn 1 must be str, got int"),
    ('[S("<answer>1</answer>")]', "solution() turn 0 must be str, got S"),
    ('["x" * 70000]', "solution() turn 0 has 70000 characters (cap 65536)"),
  ],
)
def test_solution_turns_contract(scratch_root, solution, reason):
  src = "class S(str):\n  pass\n\n\n" + TOOL.replace(
    "    calls = [", f"    return {solution}\n    calls = ["
  )
  with SandboxPool(1, sandbox(scratch_root)) as pool:
    env = pool.make_env(src)
    with pytest.raises(EnvContractError, match=re.escape(reason)):
      env.solution()


def test_denial_inside_a_tool_kills_the_worker_though_tool_env_catches_it(scratch_root):
  src = (FIXTURES / "hostile" / "th05_swallowed_frame_walk_to_open.py").read_text()
  with SandboxPool(1, sandbox(scratch_root)) as pool:
    env = pool.make_env(src)
    assert env.step("<answer>1</answer>")[1] == 0.0  # harmless until the tool runs
    pid = pool.live_pids()
    with pytest.raises(EnvViolation, match="denied operation object.__getattr__"):
      env.step('<tool_call>{"name": "probe", "arguments": {}}</tool_call>')
    assert not env.alive and pool.live_pids() == [] and pid


def test_tool_env_is_shared_read_only_and_fingerprinted(scratch_root):
  read = TOOL.replace(
    "  def tool_list_items(self):\n",
    "  def tool_list_items(self):\n    import tool_env\n"
    "    try:\n      setattr(tool_env, 'MAX_CALLS_PER_TURN', 99)\n"
    "    except AttributeError as e:\n      return str(e)\n",
  )
  with SandboxPool(1, sandbox(scratch_root)) as pool:
    env = pool.make_env(read)
    out = env.step('<tool_call>{"name": "list_items", "arguments": {}}</tool_call>')
    assert out[0] == "[list_items] module 'tool_env' is read-only in the sandbox"
  tamper = TOOL.replace("    calls = [", "    type(self).mro()[1].solution = max\n    calls = [")
  with SandboxPool(1, sandbox(scratch_root)) as pool:
    env = pool.make_env(tamper)
    with pytest.raises(EnvViolation, match=re.escape("modified shared module state (tool_env")):
      env.solution()


def test_tool_envs_load_without_the_restricted_runtime(scratch_root):
  with SandboxPool(1, sandbox(scratch_root, restricted_runtime=False)) as pool:
    env = pool.make_env(TOOL)
    assert env.reset(1)[1]["tool_problems"] == [] and len(env.solution()) == 2


# -- the validator -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_verdict(path, verdicts):
  stage, reason = expectation(path)
  report = verdicts[path.name]
  assert (report.stage, report.valid) == (stage, stage == "ok"), report.reason
  assert reason in report.reason, report.reason
  assert report.kind == "tool"
  if stage in ("extract", "static"):
    assert report.sandbox_layers == {}  # rejected before any code ran
  else:
    assert report.class_name and report.class_name.endswith("Env")
    assert report.sandbox_layers["audit_hook"] == "on"
  if report.valid:
    assert report.seeds == list(range(8)) and report.reason == ""
    # every game stage but `dependence`, which tool environments do not run (yet)
    tool_stages = {s for s in STAGES[2:] if s != "dependence"}
    assert set(report.timings) == {"extract", "static", *tool_stages, "total"}


def test_hostile_tool_runs_leave_nothing_behind(verdicts, scratch_root):
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
  assert verdicts["__seconds__"] < 120


def test_games_still_validate_as_games(scratch_root):
  report = validate(GAME.read_text(), ValidatorConfig(seeds=(0, 1), sandbox=sandbox(scratch_root)))
  assert (report.valid, report.kind) == (True, "game")


def test_tool_total_timeout_is_enforced(scratch_root):
  slow = TOOL.replace("    return str(self.stock[item])", "    sum(range(10**7))\n    return 'x'")
  cfg = sandbox(scratch_root, call_timeout=5.0, load_timeout=5.0)
  t = time.monotonic()
  report = validate(slow, ValidatorConfig(total_timeout=1.0, sandbox=cfg))
  assert time.monotonic() - t < 6
  assert not report.valid and report.stage in ("contract", "feasibility")
  assert "timed out" in report.reason and "total time limit" in report.reason


def test_probes_and_final_answer():
  specs = [
    {"function": {"name": "f", "parameters": {"type": "object", "properties": {}}}},
    {
      "function": {
        "name": "g",
        "parameters": {
          "type": "object",
          "properties": {"s": {"type": "string"}, "n": {"type": ["integer", "null"]}, "x": {}},
        },
      }
    },
  ]
  calls = [json.loads(p[len("<tool_call>") : -len("</tool_call>")]) for p in tool_probes(specs)]
  assert calls == [
    {"name": "f", "arguments": {}},
    {"name": "f", "arguments": {"spade_unexpected_argument": 1}},
    {"name": "g", "arguments": {}},
    {"name": "g", "arguments": {"spade_unexpected_argument": 1}},
    {"name": "g", "arguments": {"s": 12345, "n": "not a number", "x": None}},
  ]
  assert final_answer(["<answer>1</answer>", "<tool_call>{}</tool_call>"]) == "1"
  assert final_answer(["<answer>1</answer>", "<answer> 2 </answer>"]) == " 2 "
  assert final_answer(["<tool_call>{}</tool_call>"]) is None


# -- the check CLI -------------------------------------------------------------------------


def run_cli(*args: str) -> tuple[int, dict]:
  proc = subprocess.run(
    [sys.executable, "-m", "spade_jax.envs.check", *args, "--json"],
    capture_output=True,
    text=True,
    timeout=120,
  )
  return proc.returncode, json.loads(proc.stdout)


def test_cli_reports_the_kind_and_never_translates_tool_envs():
  rc, out = run_cli(str(VALID))
  assert rc == 0 and (out["valid"], out["stage"], out["kind"]) == (True, "ok", "tool")
  assert out["translated"] is False and out["checked_episodes"] == 0
  assert out["translation_reason"] == "tool environments run on the host"
  assert out["class_name"] == "StockLookupEnv"
  rc, out = run_cli(str(FIXTURES / "invalid" / "ti06_overrides_step.py"))
  assert rc == 1 and (out["stage"], out["kind"]) == ("static", "tool")
  assert out["translation_reason"] == "tool environments run on the host"
  rc, out = run_cli(str(GAME.parent.parent / "invalid" / "i06_disallowed_import.py"))
  assert rc == 1 and (out["stage"], out["kind"]) == ("static", "game")
  assert out["translation_reason"].startswith("not attempted")


def test_the_tool_library_validates(scratch_root):
  from spade_jax.envs.library.tool_library import TOOL_ENVS

  config = ValidatorConfig(sandbox=sandbox(scratch_root, call_timeout=10.0, load_timeout=10.0))
  for name, entry in TOOL_ENVS.items():
    report = validate(entry.source, config)
    assert (report.valid, report.kind, report.class_name) == (True, "tool", entry.class_name), (
      name,
      report.stage,
      report.reason,
    )
