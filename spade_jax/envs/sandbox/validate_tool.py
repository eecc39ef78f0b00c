"""The sandboxed validation stages of a tool environment (a `ToolEnv` subclass, see tool_env.py).

sandbox/validate.py runs `extract` and `static` for every source and dispatches here when the
static check says the kind is "tool"; the report, the stage names, the limits and the fresh
worker per validation are the same as for games:

* `load`        exec the module and instantiate the class in a sandboxed worker.
* `contract`    reset(seed) -> (non-empty str, dict) whose info lists at least one tool and no
                `tool_problems` (every tool has its `tool_<name>` method and a JSON-schema object
                for parameters; instructions come with `instruction_done`). Junk actions give a
                well-typed step result and no `contract_errors` (non-str tool results): plain
                text, malformed and non-object tool calls, unknown tools, every tool called with
                no arguments, with an unknown argument and with wrong-typed arguments,
                `<answer></answer>` and a wrong answer. A wrong answer right after reset() must
                not earn reward 1.0. solution() is a list of 1..64 agent turns (str).
* `feasibility` on every validation seed, replaying solution() turn by turn through step()
                after reset reaches reward 1.0 with terminated=True before truncation (within
                the instance's max_turns), with no contract_errors, no failed tool call and no
                format error on the way.
* `determinism` a fresh instance and the re-reset instance give the same first observation,
                the same tools and the same solution on every seed, and replaying the solution
                gives the same observations.
* `leak`        the solution's final `<answer>` text must not appear verbatim (as a whole
                token) in the first observation on most seeds, with the games' tiny-answer
                exemption (sandbox/validate_run.py).

Every step runs the tool calls inside the worker, so each is bounded by the per-call limit and
the total deadline. Hostile code in a tool body is contained as at import time: ToolEnv turns a
tool's exception into feedback text, but a denied operation is recorded by the audit hook and
tampering by the tamper check, and the worker reports either as a violation after the call;
a MemoryError propagates out of ToolEnv and is a violation too.
"""

from __future__ import annotations

import json

from spade_jax.envs.sandbox.tool_env import parse_answer
from spade_jax.envs.sandbox.validate_run import ValidationRun, leak_failure

WRONG_ANSWER = "<answer>spade-validator: certainly not the answer</answer>"
TOOL_JUNK_ACTIONS = (
  "",
  "I am not sure.",
  "<tool_call>this is not JSON</tool_call>",
  '<tool_call>{"name": 7, "arguments": {}}</tool_call>',
  '<tool_call>["a", "list"]</tool_call>',
  '<tool_call>{"name": "no_such_tool_xyz", "arguments": {}}</tool_call>',
  '<tool_call>{"name": "__init__", "arguments": {}}</tool_call>',
  '<tool_call>{"name": "reset", "arguments": [1, 2]}</tool_call>',
  '<tool_call>{"name": "unclosed", "arguments": {',
  "<answer></answer>",
  WRONG_ANSWER,
)
_WRONG = {
  "string": 12345,
  "integer": "not a number",
  "number": "not a number",
  "boolean": "not a boolean",
  "array": {"not": "an array"},
  "object": ["not", "an object"],
  "null": "not null",
}


def _wrong_value(schema) -> object:
  """A JSON value of the wrong type for a parameter's schema."""
  t = schema.get("type") if isinstance(schema, dict) else None
  if isinstance(t, list):
    t = next((x for x in t if isinstance(x, str)), None)
  return _WRONG.get(t, None) if isinstance(t, str) else None


def _call(name: str, arguments: dict) -> str:
  return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def tool_probes(tools: list) -> list[str]:
  """Junk calls of each tool in reset info's `tools` (function specs): with no arguments, with
  an unknown argument, and with every declared parameter of the wrong type."""
  out = []
  for spec in tools:
    fn = spec.get("function", {}) if isinstance(spec, dict) else {}
    name = str(fn.get("name", ""))
    params = fn.get("parameters")
    props = params.get("properties", {}) if isinstance(params, dict) else {}
    props = props if isinstance(props, dict) else {}
    out.append(_call(name, {}))
    out.append(_call(name, {"spade_unexpected_argument": 1}))
    if props:
      out.append(_call(name, {p: _wrong_value(s) for p, s in props.items()}))
  return out


def final_answer(turns: list[str]) -> str | None:
  """The text of the last `<answer>` among the agent turns (None if there is none)."""
  for turn in reversed(turns):
    answer = parse_answer(turn)
    if answer is not None:
      return answer
  return None


def _tool_error(info: dict) -> str:
  for r in info.get("tool_results") or []:
    content = str(r.get("content", "")) if isinstance(r, dict) else ""
    if content.startswith("Error"):
      return content[:200]
  return "a tool call failed"


def _reset(run: ValidationRun, env, seed) -> tuple[str, list]:
  """reset(seed) with the tool contract checked: (observation, tool specs)."""
  obs, info = run.call(env, "reset", seed)
  if "tools" not in info or "tool_problems" not in info:
    raise run.fail(f"reset({seed}) info lacks the tool specs (ToolEnv's reset wrapper did not run)")
  problems = info["tool_problems"] or []
  if problems:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    raise run.fail(f"reset({seed}): {problems[0]}{more}")
  if not info["tools"]:
    raise run.fail(f"reset({seed}) gave no tools")
  return obs, info["tools"]


def _replay(run: ValidationRun, env, seed, turns: list[str]) -> list[str]:
  """Plays the solution's turns; their observations up to success (StageFailure otherwise)."""
  seen, reward = [], 0.0
  for k, turn in enumerate(turns, 1):
    obs, reward, terminated, truncated, info = run.call(env, "step", turn)
    seen.append(obs)
    where = f"seed {seed}: solution turn {k}/{len(turns)}"
    if info.get("contract_errors"):
      raise run.fail(f"{where}: {info['contract_errors'][0]}")
    if info.get("tool_errors"):
      raise run.fail(f"{where}: the solution's tool call failed: {_tool_error(info)}")
    if info.get("format_error"):
      raise run.fail(f"{where} is neither a tool call nor an answer (format error)")
    if terminated:
      if reward != 1.0:
        raise run.fail(f"{where} terminated with reward {reward:g} (need 1.0)")
      return seen
    if truncated:
      raise run.fail(f"{where}: truncated (max_turns reached) before success")
  raise run.fail(
    f"seed {seed}: replaying the solution's {len(turns)} turns ended with reward {reward:g} and "
    f"terminated=False (need reward 1.0 and terminated=True); last observation: {seen[-1][:100]!r}"
  )


def tool_stages(run: ValidationRun, source: str, class_name: str) -> None:
  """The sandboxed stages of a tool environment (load .. leak); raises StageFailure."""
  cfg = run.config
  seeds = list(cfg.seeds)
  run.begin("load")
  env = run.make(source, class_name)
  run.end()

  run.begin("contract")
  _, tools = _reset(run, env, seeds[0])
  for action in list(cfg.tool_junk_actions) + tool_probes(tools):
    _, _, terminated, truncated, info = run.call(env, "step", action)
    if info.get("contract_errors"):
      raise run.fail(f"after the action {action[:80]!r}: {info['contract_errors'][0]}")
    if terminated or truncated:
      run.call(env, "reset", seeds[0])
  run.call(env, "reset", seeds[0])
  _, reward, terminated, _, _ = run.call(env, "step", WRONG_ANSWER)
  if reward == 1.0 or terminated:
    raise run.fail(
      f"seed {seeds[0]}: a wrong answer right after reset() earned reward {reward:g} "
      f"(terminated={terminated}): the task is solved before any tool is used"
    )
  run.call(env, "reset", seeds[0])
  run.call(env, "solution")
  run.end()

  run.begin("feasibility")
  first = {}
  for s in seeds:
    obs, tools = _reset(run, env, s)
    turns = run.call(env, "solution")
    first[s] = (obs, tools, turns, _replay(run, env, s, turns))
  run.end()

  run.begin("determinism")
  fresh = run.make(source, class_name)
  for who, inst in (("a fresh instance", fresh), ("the same instance re-reset", env)):
    for s in seeds:
      obs, info = run.call(inst, "reset", s)
      turns = run.call(inst, "solution")
      if obs != first[s][0]:
        raise run.fail(f"seed {s}: {who} gave a different first observation")
      if info.get("tools") != first[s][1]:
        raise run.fail(f"seed {s}: {who} gave different tools")
      if turns != first[s][2]:
        raise run.fail(f"seed {s}: {who} gave a different solution")
      seen = _replay(run, inst, s, turns)
      for k, (a, b) in enumerate(zip(seen, first[s][3], strict=False), 1):
        if a != b:
          raise run.fail(f"seed {s}: {who} gave a different observation at solution turn {k}")
      if len(seen) != len(first[s][3]):
        raise run.fail(f"seed {s}: {who} took a different number of turns to succeed")
  run.end()

  run.begin("leak")
  answers = {s: final_answer(first[s][2]) for s in seeds}
  why = leak_failure(seeds, answers, {s: first[s][0] for s in seeds}, "the solution's final answer")
  if why is not None:
    raise run.fail(why)
  run.end()
