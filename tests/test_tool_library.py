"""The tool-use environment library (spade_jax/envs/library/tool_library.py): its registry covers
the six tool-use skills and both task kinds, and every environment, run in-process, is solved by
its own solution on many seeds, refuses wrong or premature answers, depends on its seed and is
deterministic. Every source also passes the sandbox validator when the tool validator exists."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from spade_jax.envs.library.tool_library import (
  DIFFICULTIES,
  TOOL_ENVS,
  TOOL_SKILLS,
  load_local,
  make,
)
from spade_jax.envs.sandbox.tool_env import ToolEnv, parse_tool_calls

NAMES = sorted(TOOL_ENVS)
SEEDS = range(20)
HAS_TOOL_VALIDATOR = importlib.util.find_spec("spade_jax.envs.sandbox.validate_tool") is not None


def _replay(env, turns):
  """Steps every turn; the last step's result (earlier ones must not end the episode)."""
  out = None
  for k, turn in enumerate(turns):
    out = env.step(turn)
    _, _, terminated, truncated, info = out
    assert info["contract_errors"] == [], info["contract_errors"]
    assert not info["format_error"]
    if k < len(turns) - 1:
      assert not terminated and not truncated, f"ended at turn {k + 1} of {len(turns)}"
  return out


def test_registry_covers_skills_and_kinds():
  assert len(TOOL_ENVS) >= 12
  entries = list(TOOL_ENVS.values())
  assert {e.skill for e in entries} == set(TOOL_SKILLS)
  assert {e.difficulty for e in entries} <= set(DIFFICULTIES)
  assert {e.difficulty for e in entries} == set(DIFFICULTIES)
  assert sum(e.multi_instruction for e in entries) >= 4
  assert sum(e.state_graded for e in entries) >= 3
  assert sum(not e.state_graded for e in entries) >= 3
  for name, e in TOOL_ENVS.items():
    assert e.name == name and e.class_name.endswith("Env")
    assert "from tool_env import ToolEnv" in e.source


def test_sources_are_packaged():
  # The sources are data read through importlib.resources: the folder must be a package that
  # setup.py's find_packages picks up, so that a wheel ships every file.
  from setuptools import find_packages

  assert "spade_jax.envs.library.tools" in find_packages(include=["spade_jax", "spade_jax.*"])


def test_load_local_leaves_sys_modules_alone():
  before = set(sys.modules)
  cls = load_local(NAMES[0])
  assert issubclass(cls, ToolEnv) and cls.__name__ == TOOL_ENVS[NAMES[0]].class_name
  assert "tool_env" not in sys.modules
  assert not any(m.startswith("spade_jax.envs.library.tools.") for m in set(sys.modules) - before)
  assert load_local(NAMES[0]) is not cls  # a fresh namespace each time


@pytest.mark.parametrize("name", NAMES)
def test_solution_wins_on_every_seed(name):
  entry, cls = TOOL_ENVS[name], load_local(name)
  for seed in SEEDS:
    env = cls()
    obs, info = env.reset(seed)
    assert isinstance(obs, str) and obs
    assert info.get("tool_problems", []) == []
    assert 3 <= len(env.tools) <= 8
    assert (env.expected_answer is None) == entry.state_graded
    assert (len(env.instructions) > 0) == entry.multi_instruction
    if entry.multi_instruction:
      assert 2 <= len(env.instructions) <= 5 and obs == env.instructions[0]
    turns = env.solution()
    assert isinstance(turns, list) and 1 < len(turns) <= env.max_turns
    used = {c["name"] for t in turns for c in parse_tool_calls(t)}
    assert used < set(env.tools), f"seed {seed}: every tool is needed"
    _, reward, terminated, truncated, _ = _replay(env, turns)
    assert (reward, terminated, truncated) == (1.0, True, False), f"seed {seed}"


@pytest.mark.parametrize("name", NAMES)
def test_wrong_or_premature_answers_do_not_win(name):
  entry = TOOL_ENVS[name]
  for seed in range(5):
    env = make(name, seed)
    turns = env.solution()
    if entry.state_graded or entry.multi_instruction:
      # answering before any work (with the right answer, when there is one)
      right = env.expected_answer if env.expected_answer is not None else "Done."
      _, reward, terminated, _, _ = env.step(f"<answer>{right}</answer>")
      assert (reward, terminated) == (0.0, False), f"seed {seed}: won without any tool call"
      # ... or with the last tool turn left out
      env = make(name, seed)
      tool_turns = [t for t in turns if parse_tool_calls(t)]
      for turn in tool_turns[:-1]:
        env.step(turn)
      _, reward, terminated, _, _ = env.step(f"<answer>{right}</answer>")
      assert (reward, terminated) == (0.0, False), f"seed {seed}: won with work left undone"
    if entry.state_graded:
      continue
    env = make(name, seed)
    _replay(env, turns[:-1])
    _, reward, terminated, _, _ = env.step(f"<answer>{env.expected_answer}x wrong</answer>")
    assert (reward, terminated) == (0.0, False), f"seed {seed}: a wrong answer won"
    _, reward, terminated, _, _ = env.step(turns[-1])  # the right one still wins afterwards
    assert (reward, terminated) == (1.0, True)


@pytest.mark.parametrize("name", NAMES)
def test_task_depends_on_the_seed_and_only_on_it(name):
  cls = load_local(name)
  firsts = set()
  for seed in SEEDS:
    a, b = cls(), cls()
    obs_a, info_a = a.reset(seed)
    obs_b, info_b = b.reset(seed)
    assert obs_a == obs_b and info_a == info_b and a.solution() == b.solution()
    _replay(a, a.solution())
    assert a.reset(seed) == (obs_b, info_b) and a.solution() == b.solution()
    firsts.add(obs_a)
  assert len(firsts) >= 5, f"only {len(firsts)} distinct tasks over {len(SEEDS)} seeds"


@pytest.mark.parametrize("name", NAMES)
def test_tools_fail_gracefully(name):
  env = make(name, 0)
  for tool, spec in env.tools.items():
    props = spec["parameters"]["properties"]
    junk = [{}, {p: ["junk"] for p in props}, {p: "no-such-thing" for p in props}]
    for args in junk:
      call = json.dumps({"name": tool, "arguments": args})
      obs, reward, _, _, info = env.step(f"<tool_call>{call}</tool_call>")
      assert info["contract_errors"] == [] and isinstance(obs, str) and reward == 0.0
    env.reset(0)


@pytest.mark.skipif(not HAS_TOOL_VALIDATOR, reason="sandbox/validate_tool.py is not there yet")
@pytest.mark.parametrize("name", NAMES)
def test_every_environment_passes_the_validator(name):
  from spade_jax.envs.sandbox.validate import validate

  report = validate(TOOL_ENVS[name].source)
  assert report.valid is True, (report.stage, report.reason)
  assert report.kind == "tool"
