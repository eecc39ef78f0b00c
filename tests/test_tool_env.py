"""ToolEnv in-process: every branch of step() (tool calls, errors, answers, format errors,
truncation, instructions), the reset wrapper, tool_problems, and the parsers."""

import json

import pytest

from spade_jax.envs.sandbox.tool_env import (
  FORMAT_ERROR_REWARD,
  FORMAT_ERROR_TEXT,
  MAX_CALLS_PER_TURN,
  TOOL_RESULT_CHARS,
  ToolEnv,
  answers_match,
  parse_answer,
  parse_tool_calls,
  render_observation,
  strip_thinking,
  tool_problems,
  tool_specs,
)

OBJ = {"type": "object", "properties": {}}
ITEM = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}


def call(name, **arguments) -> str:
  return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class ShopEnv(ToolEnv):
  def reset(self, seed=None):
    self.stock = {"bolts": 5, "nuts": 7}
    self.tools = {
      "get_stock": {"description": "Units of an item.", "parameters": ITEM},
      "count": {"description": "Returns an int (a contract error).", "parameters": OBJ},
      "boom": {"description": "Raises.", "parameters": OBJ},
      "inner_type_error": {"description": "Raises TypeError inside.", "parameters": OBJ},
      "big": {"description": "A long result.", "parameters": OBJ},
      "oom": {"description": "Raises MemoryError.", "parameters": OBJ},
      "ghost": {"description": "Declared without a method.", "parameters": OBJ},
    }
    self.expected_answer = "12"
    return "How many bolts and nuts?", {"seed": seed}

  def tool_get_stock(self, item):
    return str(self.stock.get(item, "unknown"))

  def tool_count(self):
    return 2

  def tool_boom(self):
    raise ValueError("kaput")

  def tool_inner_type_error(self):
    return len(5)

  def tool_big(self):
    return "x" * (TOOL_RESULT_CHARS + 10)

  def tool_oom(self):
    raise MemoryError

  def tool_hidden(self):  # a method without a declared tool
    return "secret"

  def solution(self):
    return [call("get_stock", item="bolts") + call("get_stock", item="nuts"), "<answer>12</answer>"]


class TodoEnv(ToolEnv):
  """Two instructions; a goal on the backend state; no expected answer."""

  def reset(self, seed=None):
    self.todo = []
    self.instructions = ["Add milk.", "Add eggs."]
    self.tools = {"add": {"description": "Adds an item.", "parameters": ITEM}}
    return self.instructions[0], {}

  def instruction_done(self, i):
    return ("milk", "eggs")[i] in self.todo

  def tool_add(self, item):
    self.todo.append(item)
    return "ok"

  def goal_reached(self):
    return self.todo == ["milk", "eggs"]

  def solution(self):
    return [call("add", item="milk"), call("add", item="eggs"), "<answer>done</answer>"]


def test_init_resets_and_reset_info_is_extended():
  env = ShopEnv(max_turns=3)
  assert env.max_turns == 3 and env.expected_answer == "12" and env.turn_count == 0
  obs, info = env.reset(5)
  assert obs == "How many bolts and nuts?" and info["seed"] == 5
  assert [t["function"]["name"] for t in info["tools"]] == list(env.tools)
  assert info["tools"][0] == {
    "type": "function",
    "function": {"name": "get_stock", "description": "Units of an item.", "parameters": ITEM},
  }
  assert info["instructions"] == 0
  assert info["tool_problems"] == ["tool 'ghost' has no method tool_ghost()"]
  _, info = TodoEnv().reset(0)
  assert (info["instructions"], info["tool_problems"]) == (2, [])


def test_reset_clears_the_protocol_state():
  env = TodoEnv()
  env.step(call("add", item="milk"))
  env.expected_answer = "stale"
  assert (env.turn_count, env.current) == (1, 1)
  env.reset(1)
  assert (env.turn_count, env.current, env.expected_answer) == (0, 0, None)


def test_base_class_needs_reset_and_solution():
  with pytest.raises(NotImplementedError):
    ToolEnv()

  class NoSolutionEnv(ToolEnv):
    def reset(self, seed=None):
      return "o", {}

  with pytest.raises(NotImplementedError):
    NoSolutionEnv().solution()


def test_tool_calls_run_in_order():
  env = ShopEnv()
  obs, reward, terminated, truncated, info = env.step(
    call("get_stock", item="nuts") + " and " + call("get_stock", item="bolts")
  )
  assert obs == "[get_stock] 7\n[get_stock] 5"
  assert (reward, terminated, truncated) == (0.0, False, False)
  assert info == {
    "tool_results": [
      {"name": "get_stock", "content": "7"},
      {"name": "get_stock", "content": "5"},
    ],
    "tool_calls": 2,
    "tool_errors": 0,
    "format_error": False,
    "contract_errors": [],
  }


def test_calls_beyond_the_per_turn_limit_are_skipped():
  env = ShopEnv()
  _, _, _, _, info = env.step(call("get_stock", item="bolts") * (MAX_CALLS_PER_TURN + 3))
  assert info["tool_calls"] == MAX_CALLS_PER_TURN
  assert len(info["tool_results"]) == MAX_CALLS_PER_TURN + 1
  assert info["tool_results"][-1] == {
    "name": "",
    "content": f"Error: only {MAX_CALLS_PER_TURN} tool calls run per turn; 3 skipped",
  }


@pytest.mark.parametrize(
  "action, content",
  [
    ("<tool_call>not json</tool_call>", "Error: malformed tool call: the body is not valid JSON"),
    ("<tool_call>[1, 2]</tool_call>", "Error: malformed tool call: the body must be a JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'Error: malformed tool call: missing "name"'),
    (
      '<tool_call>{"name": "get_stock", "arguments": [1]}</tool_call>',
      'Error: malformed tool call to "get_stock": "arguments" must be an object',
    ),
    (call("nope"), "Error: unknown tool 'nope' (available: big, boom, count,"),
    (call("get stock"), "Error: unknown tool 'get stock'"),
    (call("ghost"), "Error: unknown tool 'ghost'"),
    (call("hidden"), "Error: unknown tool 'hidden'"),  # a method, but not a declared tool
    (call("get_stock"), "Error: wrong arguments for tool 'get_stock'"),
    (call("get_stock", item="bolts", extra=1), "Error: wrong arguments for tool 'get_stock'"),
    (call("inner_type_error"), "Error: TypeError in tool 'inner_type_error'"),
    (call("boom"), "Error: tool 'boom' failed: ValueError: kaput"),
    (call("count"), "Error: tool 'count' returned no text"),
  ],
)
def test_failed_calls_become_error_text(action, content):
  env = ShopEnv()
  obs, reward, terminated, truncated, info = env.step(action)
  assert info["tool_results"][0]["content"].startswith(content)
  assert obs.endswith(info["tool_results"][0]["content"])
  assert (reward, terminated, truncated, info["tool_errors"]) == (0.0, False, False, 1)
  bad_result = action == call("count")
  assert info["contract_errors"] == (["tool 'count' returned int, not str"] if bad_result else [])


def test_argument_spellings():
  env = ShopEnv()
  for body in (
    '{"name": "get_stock", "parameters": {"item": "nuts"}}',  # "parameters" for "arguments"
    '{"name": "get_stock", "arguments": "{\\"item\\": \\"nuts\\"}"}',  # a JSON string
  ):
    _, _, _, _, info = env.step(f"<tool_call>{body}</tool_call>")
    assert info["tool_results"] == [{"name": "get_stock", "content": "7"}]
  _, _, _, _, info = env.step('<tool_call>{"name": "get_stock", "arguments": ""}</tool_call>')
  assert info["tool_results"][0]["content"].startswith("Error: wrong arguments")


def test_long_results_are_truncated_and_memory_errors_propagate():
  env = ShopEnv()
  _, _, _, _, info = env.step(call("big"))
  content = info["tool_results"][0]["content"]
  assert content == "x" * TOOL_RESULT_CHARS + " ... (truncated)" and info["tool_errors"] == 0
  with pytest.raises(MemoryError):
    env.step(call("oom"))  # the sandbox reports it as a violation; it is never feedback


@pytest.mark.parametrize(
  "answer, correct",
  [("12", True), (" 12.00 ", True), ("$12", True), ("12.009", True), ("13", False), ("", False)],
)
def test_answers_are_judged(answer, correct):
  env = ShopEnv()
  obs, reward, terminated, truncated, info = env.step(f"Sure. <answer>{answer}</answer>")
  assert (reward, terminated, truncated) == ((1.0, True, False) if correct else (0.0, False, False))
  assert obs == ("Correct." if correct else f"Incorrect answer: {answer.strip()!r}.")
  assert info["tool_results"] == [] and info["tool_calls"] == 0


def test_tool_calls_take_precedence_over_an_answer_and_thinking_is_ignored():
  env = ShopEnv()
  _, reward, terminated, _, info = env.step(call("get_stock", item="nuts") + "<answer>12</answer>")
  assert (reward, terminated, info["tool_calls"]) == (0.0, False, 1)
  thought = "<think>" + call("boom") + "<answer>1</answer></think><answer>12</answer>"
  _, reward, terminated, _, info = env.step(thought)
  assert (reward, terminated, info["tool_calls"]) == (1.0, True, 0)


def test_format_error_and_non_str_actions():
  env = ShopEnv()
  for action in ("I think it is 12.", 12, "<answer>12"):
    obs, reward, terminated, _, info = env.step(action)
    assert (obs, reward, terminated) == (FORMAT_ERROR_TEXT, FORMAT_ERROR_REWARD, False)
    assert info["format_error"] is True


def test_truncation_at_max_turns():
  env = ShopEnv(max_turns=2)
  assert env.step("<answer>1</answer>")[3] is False
  _, _, terminated, truncated, _ = env.step(call("get_stock", item="bolts"))
  assert (terminated, truncated) == (False, True)
  env.reset()
  env.step("<answer>1</answer>")
  assert env.step("<answer>12</answer>")[2:4] == (True, False)  # success is never truncated


def test_instructions_are_revealed_and_gate_the_answer():
  env = TodoEnv()
  obs, reward, _, _, info = env.step("<answer>done</answer>")
  assert obs == "Not done yet: the current request has not been completed." and reward == 0.0
  obs, _, _, _, info = env.step(call("add", item="milk"))
  assert info["user_message"] == "Add eggs." and obs == "[add] ok\nUser: Add eggs."
  assert env.current == 1
  obs, _, _, _, info = env.step(call("add", item="eggs"))
  assert "user_message" not in info and obs == "[add] ok" and env.current == 2
  assert env.step("<answer>anything</answer>")[1:3] == (1.0, True)  # no expected answer


def test_goal_reached_gates_the_answer():
  env = TodoEnv()
  env.step(call("add", item="milk") + call("add", item="eggs") + call("add", item="ham"))
  obs, reward, terminated, _, _ = env.step("<answer>done</answer>")
  assert obs == "Not done yet: the task's goal has not been reached."
  assert (reward, terminated) == (0.0, False)


def test_the_solutions_replay():
  for env in (ShopEnv(), TodoEnv()):
    env.reset(0)
    for turn in env.solution():
      out = env.step(turn)
    assert out[1:3] == (1.0, True)


def test_tool_specs_of_malformed_tools():
  assert tool_specs(None) == [] and tool_specs(["a"]) == []
  assert tool_specs({"a": "nonsense", 3: {"description": 5, "parameters": [1]}}) == [
    {"type": "function", "function": {"name": "a", "description": "", "parameters": OBJ}},
    {"type": "function", "function": {"name": "3", "description": "5", "parameters": OBJ}},
  ]


class _Probe:
  def __init__(self, tools, instructions=None):
    self.tools, self.instructions = tools, instructions

  def tool_a(self):
    return "a"


class _ProbeDone(_Probe):
  def instruction_done(self, i):
    return False


@pytest.mark.parametrize(
  "tools, instructions, problem",
  [
    ({}, None, "self.tools must be a non-empty dict"),
    ([1], None, "self.tools must be a non-empty dict"),
    ({"b c": {}}, None, "tool name 'b c' is not an identifier"),
    ({"b": {"description": "", "parameters": OBJ}}, None, "tool 'b' has no method tool_b()"),
    ({"a": "spec"}, None, "tool 'a': its spec must be a dict"),
    ({"a": {"parameters": OBJ}}, None, "tool 'a': \"description\" must be a string"),
    ({"a": {"description": ""}}, None, '"parameters" must be a JSON-schema object'),
    ({"a": {"description": "", "parameters": {"properties": {}}}}, None, '"type": "object"'),
    (
      {"a": {"description": "", "parameters": {"type": "object", "properties": []}}},
      None,
      '"properties" must map each parameter name to a schema object',
    ),
    (
      {"a": {"description": "", "parameters": {"type": "object", "required": "x"}}},
      None,
      '"required" must be a list of parameter names',
    ),
    (
      {"a": {"description": "", "parameters": {"type": "object", "required": ["x"]}}},
      None,
      "required parameters ['x'] are not in \"properties\"",
    ),
    ({"a": {"description": "", "parameters": OBJ}}, ["one", 2], "must be a list of strings"),
    ({"a": {"description": "", "parameters": OBJ}}, ["one"], "instruction_done(i) is not"),
  ],
)
def test_tool_problems(tools, instructions, problem):
  problems = tool_problems(_Probe(tools, instructions))
  assert len(problems) == 1 and problem in problems[0], problems


def test_tool_problems_of_a_good_env():
  good = {"a": {"description": "d", "parameters": ITEM | {"properties": {"item": {}}}}}
  assert tool_problems(_ProbeDone(good, ["one", "two"])) == []
  assert tool_problems(_Probe(good)) == []  # no instructions: instruction_done is not needed


def test_parse_tool_calls():
  text = (
    "<think><tool_call>hidden</tool_call></think>"
    + call("a", x=1)
    + '<tool_call> {"name": "b"} </tool_call>'
    + '<tool_call>{"name": "c", "arguments": "null"}'  # unclosed: takes the rest of the text
  )
  assert parse_tool_calls(text) == [
    {"name": "a", "arguments": {"x": 1}, "error": None},
    {"name": "b", "arguments": {}, "error": None},
    {"name": "c", "arguments": {}, "error": None},
  ]
  assert parse_tool_calls("no calls") == []
  deep = "<tool_call>" + "[" * 100_000 + "</tool_call>"
  assert parse_tool_calls(deep)[0]["error"] == "malformed tool call: the body is not valid JSON"


def test_strip_thinking_and_parse_answer():
  assert strip_thinking("a<think>b</think>c<think>unclosed") == "ac"
  assert strip_thinking("hidden</think>shown") == "shown"  # the template opened the block
  assert parse_answer("<answer>1</answer> <answer> 2 </answer>") == " 2 "
  assert parse_answer("<think><answer>1</answer></think>") is None
  assert parse_answer("<answer>open") is None


def test_answers_match():
  assert answers_match(" Paris ", "paris") and answers_match("1,000", 1000)
  assert answers_match("$3.50", "3.5") and answers_match("2.01", "2")
  assert not answers_match("2.02", "2") and not answers_match("two", "2")


def test_render_observation():
  results = [{"name": "a", "content": "1"}, {"name": "", "content": "note"}]
  assert render_observation(results, None) == "[a] 1\n[tool] note"
  assert render_observation([], "Next.") == "User: Next."
