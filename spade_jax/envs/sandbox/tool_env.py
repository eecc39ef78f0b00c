"""`ToolEnv`: the base class of tool-use environments (the contract of docs/DESIGN.md §3.7).

A designer-written tool environment is one module that subclasses `ToolEnv` (imported as
`from tool_env import ToolEnv`: the sandbox worker loads this file as the top-level module
`tool_env`; the package imports it as `spade_jax.envs.sandbox.tool_env`) and supplies
`reset(seed)`, `solution()` (the agent turns that solve the task) and one `tool_<name>(**args)`
method per key of `self.tools`; optionally `goal_reached()` (a check of the backend state) and,
for multi-instruction tasks, `self.instructions` plus `instruction_done(i)`.

This class owns the protocol: `__init__(max_turns=10, **kw)` and `step(action)`. A step runs
every `<tool_call>{"name": N, "arguments": {...}}</tool_call>` in the action, in order (at most
`MAX_CALLS_PER_TURN`), through `tool_N(**arguments)`; an unknown tool, malformed JSON, wrong
arguments, an exception inside the tool or a non-string result becomes that call's error text,
never a crash (reward 0); only `MemoryError` propagates (the sandbox reports it as a resource
violation, as it does anywhere else). Without a tool call, the last `<answer>A</answer>` is
judged: correct when every instruction is done, `goal_reached()` holds and `A` matches
`expected_answer` (when it is not None; case-insensitive after strip, or numerically within 0.01
after removing `$` and `,`) -> reward 1.0, terminated; otherwise feedback and reward 0. Neither
-> a format error, reward `FORMAT_ERROR_REWARD`. Truncated when the turn counter reaches
`max_turns` without success. `<think>...</think>` blocks are ignored.

`info` carries what a chat template needs: `tool_results` (one `{"name", "content"}` per executed
call) and `user_message` (a newly revealed instruction), plus counters (`tool_calls`,
`tool_errors`, `format_error`) and `contract_errors` (results that broke the contract: the
validator rejects an environment whose solution produces any). `reset()` is wrapped so that it
first clears the turn counter, `current`, `instructions` and `expected_answer`, and its info
gains `tools` (the OpenAI-style function specs of `self.tools`), `instructions` (their count)
and `tool_problems` (`tool_problems(self)`: what breaks the contract of `self.tools` and
`self.instructions`; empty for a well-formed environment, and the validator rejects any other).
`solution()` returns the agent turns as a list of 1..`MAX_SOLUTION_TURNS` strings.

Standard library only: the worker imports this module with `python -S`, outside the package, and
all of it runs inside the sandbox next to the untrusted subclass.
"""

from __future__ import annotations

import json
import re

MAX_CALLS_PER_TURN = 8
MAX_SOLUTION_TURNS = 64
TOOL_RESULT_CHARS = 4000
FORMAT_ERROR_REWARD = -0.1
FORMAT_ERROR_TEXT = (
  'Format error: call tools with <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
  "or give the final answer as <answer>...</answer>."
)

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def strip_thinking(text: str) -> str:
  """`text` without `<think>...</think>` blocks (an unclosed one runs to the end)."""
  if "</think>" in text and "<think>" not in text:
    text = text.split("</think>", 1)[1]
  return _THINK.sub("", text)


def parse_tool_calls(text: str) -> list[dict]:
  """Every `<tool_call>...</tool_call>` in `text` (thinking removed), in order.

  Each call is `{"name": str | None, "arguments": dict | None, "error": str | None}`; the body
  must be a JSON object with a string `name` and an object `arguments` (or `parameters`; a JSON
  string holding an object is accepted; missing means `{}`). An unclosed tag takes the rest of
  the text. A malformed call keeps its error text and is reported to the agent, not raised."""
  calls = []
  for m in _CALL.finditer(strip_thinking(text)):
    body = m.group(1).strip()
    call = {"name": None, "arguments": None, "error": None}
    try:
      obj = json.loads(body)
    except (ValueError, RecursionError):
      call["error"] = "malformed tool call: the body is not valid JSON"
      calls.append(call)
      continue
    if not isinstance(obj, dict):
      call["error"] = "malformed tool call: the body must be a JSON object"
    elif not isinstance(obj.get("name"), str):
      call["error"] = 'malformed tool call: missing "name"'
    else:
      call["name"] = obj["name"]
      args = obj.get("arguments", obj.get("parameters", {}))
      if isinstance(args, str):
        try:
          args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
          args = None
      if args is None:
        args = {}
      if isinstance(args, dict) and all(isinstance(k, str) for k in args):
        call["arguments"] = args
      else:
        call["error"] = f'malformed tool call to "{obj["name"]}": "arguments" must be an object'
    calls.append(call)
  return calls


def parse_answer(text: str) -> str | None:
  """The content of the last `<answer>...</answer>` (thinking removed), or None."""
  found = _ANSWER.findall(strip_thinking(text))
  return found[-1] if found else None


def _number(text: str) -> float | None:
  try:
    return float(text.replace("$", "").replace(",", "").strip())
  except ValueError:
    return None


def answers_match(given: str, expected) -> bool:
  """Case-insensitive equality after strip, or numbers within 0.01 (`$` and `,` removed)."""
  g, e = str(given).strip(), str(expected).strip()
  if g.casefold() == e.casefold():
    return True
  a, b = _number(g), _number(e)
  return a is not None and b is not None and abs(a - b) <= 0.01


def tool_specs(tools) -> list[dict]:
  """`self.tools` as the chat template's function specs (malformed entries become minimal)."""
  if not isinstance(tools, dict):
    return []
  out = []
  for name, spec in tools.items():
    spec = spec if isinstance(spec, dict) else {}
    params = spec.get("parameters")
    out.append(
      {
        "type": "function",
        "function": {
          "name": str(name),
          "description": str(spec.get("description", "")),
          "parameters": params
          if isinstance(params, dict)
          else {"type": "object", "properties": {}},
        },
      }
    )
  return out


def render_observation(tool_results: list[dict], user_message: str | None) -> str:
  """The plain-text observation of a tool turn (templates use `info` instead)."""
  parts = [f"[{r['name'] or 'tool'}] {r['content']}" for r in tool_results]
  if user_message is not None:
    parts.append(f"User: {user_message}")
  return "\n".join(parts)


def _schema_problem(name: str, params) -> str | None:
  if not isinstance(params, dict) or params.get("type") != "object":
    return f'tool {name!r}: "parameters" must be a JSON-schema object with "type": "object"'
  props = params.get("properties", {})
  if not isinstance(props, dict) or not all(isinstance(p, dict) for p in props.values()):
    return f'tool {name!r}: "properties" must map each parameter name to a schema object'
  required = params.get("required", [])
  if not isinstance(required, list | tuple) or not all(isinstance(r, str) for r in required):
    return f'tool {name!r}: "required" must be a list of parameter names'
  missing = [r for r in required if r not in props]
  if missing:
    return f'tool {name!r}: required parameters {missing} are not in "properties"'
  return None


def tool_problems(env) -> list[str]:
  """What breaks the tool contract after `env.reset()`: `tools` not a non-empty dict of
  identifier names to `{"description": str, "parameters": JSON-schema object}` (with a dict
  `properties` and `required` names among them), a tool without its `tool_<name>` method, or
  `instructions` that are not strings or are set without `instruction_done` overridden."""
  tools = getattr(env, "tools", None)
  if not isinstance(tools, dict) or not tools:
    return ["self.tools must be a non-empty dict {name: {description, parameters}}"]
  out = []
  for name, spec in tools.items():
    if not isinstance(name, str) or not _NAME.match(name):
      out.append(f"tool name {name!r} is not an identifier")
      continue
    if not callable(getattr(env, "tool_" + name, None)):
      out.append(f"tool {name!r} has no method tool_{name}()")
    if not isinstance(spec, dict):
      out.append(f"tool {name!r}: its spec must be a dict with description and parameters")
      continue
    if not isinstance(spec.get("description"), str):
      out.append(f'tool {name!r}: "description" must be a string')
    problem = _schema_problem(name, spec.get("parameters"))
    if problem is not None:
      out.append(problem)
  instructions = getattr(env, "instructions", None)
  if instructions:
    if not isinstance(instructions, list | tuple) or not all(
      isinstance(i, str) for i in instructions
    ):
      out.append("self.instructions must be a list of strings")
    elif getattr(type(env), "instruction_done", None) in (None, ToolEnv.instruction_done):
      out.append("self.instructions is set but instruction_done(i) is not overridden")
  return out


def _wrap_reset(user_reset):
  def reset(self, seed=None, *args, **kwargs):
    self.turn_count = 0
    self.current = 0
    self.instructions = []
    self.expected_answer = None
    out = user_reset(self, seed, *args, **kwargs)
    if isinstance(out, tuple | list) and len(out) == 2 and isinstance(out[1], dict):
      info = dict(out[1])
      info["tools"] = tool_specs(getattr(self, "tools", None))
      instructions = getattr(self, "instructions", None)
      info["instructions"] = len(instructions) if isinstance(instructions, list | tuple) else 0
      info["tool_problems"] = tool_problems(self)
      return out[0], info
    return out  # the wrong shape is the validator's to report

  reset.__name__ = reset.__qualname__ = "reset"
  reset.__doc__ = getattr(user_reset, "__doc__", None)
  return reset


class ToolEnv:
  """Base class of tool-use environments; see the module docstring for the protocol."""

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    if "reset" in cls.__dict__:
      cls.reset = _wrap_reset(cls.__dict__["reset"])

  def __init__(self, max_turns=10, **kwargs):
    self.max_turns = max_turns
    self.turn_count = 0
    self.current = 0
    self.instructions = []
    self.expected_answer = None
    self.tools = {}
    self.reset()

  def reset(self, seed=None):
    raise NotImplementedError("a ToolEnv subclass defines reset(seed)")

  def solution(self):
    raise NotImplementedError("a ToolEnv subclass defines solution()")

  def goal_reached(self):
    return True

  def instruction_done(self, i):
    return False

  # -- the protocol -----------------------------------------------------------------------

  def _call_tool(self, call: dict, info: dict) -> tuple[str, bool]:
    """(content, ok) of one parsed call."""
    if call["error"] is not None:
      return f"Error: {call['error']}", False
    name = call["name"]
    tools = getattr(self, "tools", None)
    tools = tools if isinstance(tools, dict) else {}
    fn = getattr(self, "tool_" + name, None) if _NAME.match(name) else None
    if name not in tools or not callable(fn):
      known = ", ".join(sorted(str(k) for k in tools)) or "none"
      return f"Error: unknown tool '{name[:60]}' (available: {known})", False
    try:
      result = fn(**call["arguments"])
    except TypeError as e:
      at_call = e.__traceback__ is not None and e.__traceback__.tb_next is None
      what = "wrong arguments for" if at_call else "TypeError in"
      return f"Error: {what} tool '{name}': {str(e)[:200]}", False
    except MemoryError:
      raise  # a resource violation, not feedback: the sandbox reports it
    except Exception as e:  # noqa: BLE001 - a failing tool is the agent's feedback
      return f"Error: tool '{name}' failed: {type(e).__name__}: {str(e)[:200]}", False
    if not isinstance(result, str):
      info["contract_errors"].append(f"tool '{name}' returned {type(result).__name__}, not str")
      return f"Error: tool '{name}' returned no text", False
    if len(result) > TOOL_RESULT_CHARS:
      result = result[:TOOL_RESULT_CHARS] + " ... (truncated)"
    return result, True

  def _advance(self) -> str | None:
    """Marks done instructions; the newly current instruction's text when one was reached."""
    instructions = getattr(self, "instructions", None) or []
    start = self.current
    while self.current < len(instructions) and self.instruction_done(self.current):
      self.current += 1
    if self.current != start and self.current < len(instructions):
      return str(instructions[self.current])
    return None

  def _judge(self, answer: str) -> tuple[bool, str]:
    instructions = getattr(self, "instructions", None) or []
    if self.current < len(instructions):
      return False, "Not done yet: the current request has not been completed."
    if not self.goal_reached():
      return False, "Not done yet: the task's goal has not been reached."
    expected = getattr(self, "expected_answer", None)
    if expected is not None and not answers_match(answer, expected):
      return False, f"Incorrect answer: {answer.strip()[:200]!r}."
    return True, "Correct."

  def step(self, action):
    text = action if isinstance(action, str) else str(action)
    self.turn_count = getattr(self, "turn_count", 0) + 1
    info = {
      "tool_results": [],
      "tool_calls": 0,
      "tool_errors": 0,
      "format_error": False,
      "contract_errors": [],
    }
    calls = parse_tool_calls(text)
    reward, terminated = 0.0, False
    if calls:
      for call in calls[:MAX_CALLS_PER_TURN]:
        content, ok = self._call_tool(call, info)
        info["tool_results"].append({"name": call["name"] or "", "content": content})
        info["tool_calls"] += 1
        info["tool_errors"] += 0 if ok else 1
      skipped = len(calls) - MAX_CALLS_PER_TURN
      if skipped > 0:
        note = f"Error: only {MAX_CALLS_PER_TURN} tool calls run per turn; {skipped} skipped"
        info["tool_results"].append({"name": "", "content": note})
      message = self._advance()
      if message is not None:
        info["user_message"] = message
      obs = render_observation(info["tool_results"], message)
    else:
      answer = parse_answer(text)
      if answer is None:
        obs, reward, info["format_error"] = FORMAT_ERROR_TEXT, FORMAT_ERROR_REWARD, True
      else:
        correct, obs = self._judge(answer)
        reward, terminated = (1.0, True) if correct else (0.0, False)
    truncated = not terminated and self.turn_count >= getattr(self, "max_turns", 10)
    return obs, reward, terminated, truncated, info
