"""BFCL-v4 multi-turn suite: the ground-truth oracle passes BFCL's own checker on every category
and the empty policy fails it; hostile tool calls are never evaluated; miss_func adds its
held-out functions with BFCL's prompting-path message; episodes never share backend state; the
step cap force-quits as BFCL does; an oracle episode frames under Qwen3's tool template."""

import ast
import gc
import json
from pathlib import Path

import pytest

pytest.importorskip("bfcl_eval")

from bfcl_eval.constants.default_prompts import (  # noqa: E402
  DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING,
  MAXIMUM_STEP_LIMIT,
)
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils  # noqa: E402
from hf_fixtures import tiny_tokenizer_dir  # noqa: E402

from spade_jax.eval import bfcl_calls  # noqa: E402
from spade_jax.eval.bfcl import (  # noqa: E402
  BfclSuite,
  added_functions_message,
  summary,
  tool_call_text,
)
from spade_jax.eval.bfcl_calls import CATEGORIES, call_string  # noqa: E402
from spade_jax.eval.suite import empty_policy, score_of  # noqa: E402

QWEN3 = (Path(__file__).parent / "fixtures" / "chat_templates" / "qwen3.jinja").read_text()


@pytest.fixture(scope="module")
def suite():
  return BfclSuite()


def _prompt(suite, prompt_id):
  return next(p for p in suite.prompts() if p.id == prompt_id)


def _play(suite, prompt, policy):
  """(score, final info, assistant turns) of one episode driven by ``policy``."""
  env = suite.make_env(prompt)
  obs, info = env.reset(seed=prompt.seed)
  term = trunc = False
  reward, turns = 0.0, 0
  while not (term or trunc) and turns < suite.max_turns:
    obs, reward, term, trunc, info = env.step(policy(obs, info))
    turns += 1
  return score_of(reward, term), info, turns


def _leftover(prefix: str) -> list[str]:
  return [k for k in vars(multi_turn_utils) if k.startswith(prefix)]


def test_suite_shape(suite):
  prompts = suite.prompts()
  assert (suite.name, suite.framing, suite.metric) == ("bfcl_v4", "tool", "accuracy")
  assert [p.category for p in prompts][::200] == list(CATEGORIES)
  assert len(prompts) == 800 and len({p.id for p in prompts}) == 800
  assert prompts[0].id == "multi_turn_base_0" and prompts[201].id == "multi_turn_miss_func_1"
  assert all(p.id.startswith(p.category + "_") for p in prompts)
  assert all(len(p.data["ground_truth"]) == len(p.data["question"]) for p in prompts)
  most_turns = max(len(p.data["question"]) for p in prompts)
  assert suite.max_turns >= (MAXIMUM_STEP_LIMIT + 1) * most_turns
  assert suite.sampling.greedy and suite.max_new_tokens == 4096
  only = BfclSuite(["multi_turn_miss_param"])
  assert {p.category for p in only.prompts()} == {"multi_turn_miss_param"}
  with pytest.raises(ValueError):
    BfclSuite(["multi_turn_composite"])


def test_ground_truth_passes_and_empty_fails_on_every_category(suite):
  truth: dict[str, list[float]] = {c: [] for c in CATEGORIES}
  empty: dict[str, list[float]] = {c: [] for c in CATEGORIES}
  failed = []
  for p in suite.prompts():
    score, info, _ = _play(suite, p, suite.oracle(p))
    truth[p.category].append(score)
    if score < 1.0:
      failed.append(p.id)
    empty[p.category].append(_play(suite, p, empty_policy)[0])
    assert "eval" in info
  for c in CATEGORIES:
    assert len(truth[c]) == 200
    assert sum(truth[c]) / 200 >= 0.95, (c, failed)
    assert sum(empty[c]) / 200 <= 0.05, c
  # the one known miss: its ground truth calls `tail` two turns before BFCL adds it
  assert failed == ["multi_turn_miss_func_49"]
  assert summary(truth)["multi_turn_overall"] >= 0.95


def test_empty_turns_fail_with_bfcls_verdict(suite):
  p = _prompt(suite, "multi_turn_base_1")
  score, info, turns = _play(suite, p, empty_policy)
  assert (score, turns) == (0.0, len(p.data["question"]))
  assert info["eval"]["valid"] is False
  assert info["eval"]["error_type"] == "multi_turn:empty_turn_model_response"


def test_tools_are_openai_specs_of_bfcls_docs(suite):
  env = suite.make_env(_prompt(suite, "multi_turn_base_2"))
  _, info = env.reset(seed=0)
  specs = {t["function"]["name"]: t for t in info["tools"]}
  docs = bfcl_calls.load_jsonl(bfcl_calls.DATA_DIR / "multi_turn_func_doc" / "ticket_api.json")
  assert set(specs) >= {d["name"] for d in docs} | {"cd", "ls"}
  cd = specs["cd"]
  assert cd["type"] == "function" and cd["function"]["parameters"]["type"] == "object"
  assert "Note that the provided function is in Python 3 syntax." in cd["function"]["description"]
  json.dumps(info["tools"])  # JSON-able for the template
  floats = [
    prop
    for t in info["tools"]
    for prop in t["function"]["parameters"]["properties"].values()
    if prop.get("format") == "float"
  ]
  for t in info["tools"]:
    for prop in t["function"]["parameters"]["properties"].values():
      assert prop["type"] in ("string", "integer", "number", "boolean", "array", "object")
  assert all(p["type"] == "number" for p in floats)
  env.close()


def test_hostile_calls_are_never_evaluated(suite, tmp_path):
  marker = tmp_path / "pwned"
  code = f"__import__('os').system('touch {marker}')"
  env = suite.make_env(_prompt(suite, "multi_turn_base_1"))
  env.reset(seed=0)
  hostile = [
    (code, {}),
    ("__import__('os').system", {"command": f"touch {marker}"}),
    ("ls", {f"a=True) or {code} or (0": True}),
    ("ls", {"a": {"x": 1}, "__class__": 1}),
    ("eval", {"source": code}),
    ("open", {"file": str(marker), "mode": "w"}),
  ]
  action = "\n".join(tool_call_text(n, a) for n, a in hostile)
  action += '\n<tool_call>{"name": "ls", "arguments": "' + code + '"}</tool_call>'
  obs, reward, term, _, info = env.step(action)
  contents = [r["content"] for r in info["tool_results"]]
  assert len(contents) == 7 and not term and reward == 0.0
  for c in contents[:3] + contents[4:6]:
    assert c.startswith("Error: "), c
  assert "Error during execution" in contents[3]  # a real function, bad arguments: BFCL's error
  # arguments that are a string of code, not an object: parse_tool_calls drops them
  assert contents[6] == '{"current_directory_content": ["workspace"]}'
  # code in a string value is data: written and read back verbatim, never run
  note = f"'); {code}; print('"
  obs, _, _, _, info = env.step(
    tool_call_text("touch", {"file_name": "note.txt"})
    + tool_call_text("echo", {"content": note, "file_name": "note.txt"})
    + tool_call_text("cat", {"file_name": "note.txt"})
  )
  assert json.loads(info["tool_results"][2]["content"]) == {"file_content": note}
  assert not marker.exists()
  env.close()


def _nested(depth):
  value = 1
  for _ in range(depth):
    value = [value]
  return value


@pytest.mark.parametrize(
  "value",
  [
    (1, 2),
    {1, 2},
    object(),
    float("nan"),
    float("inf"),
    {1: "a"},
    _nested(bfcl_calls.MAX_DEPTH + 1),
  ],
)
def test_call_string_rejects_non_json_values(value):
  text, error = call_string("ls", {"a": value}, {"ls"})
  assert text is None and error.startswith("Error: ")


def test_call_string_is_a_literal_call():
  assert call_string("ls", {"a": _nested(bfcl_calls.MAX_DEPTH)}, {"ls"})[1] is None
  args = {"a": "x') or exec('1", "b": [1, 2.5, None, True], "c": {"k": "\n\\'\""}}
  text, error = call_string("f", args, {"f"})
  node = ast.parse(text, mode="eval").body
  assert error is None and node.func.id == "f" and not node.args
  assert {k.arg: ast.literal_eval(k.value) for k in node.keywords} == args
  assert call_string("g", {}, {"f"})[0] is None


def test_miss_func_adds_functions_as_bfcl_does(suite):
  p = _prompt(suite, "multi_turn_miss_func_0")
  assert p.data["missed_function"] == {"3": ["sort"]} and p.data["question"][3] == []
  env = suite.make_env(p)
  obs, info = env.reset(seed=0)
  assert "sort" not in {t["function"]["name"] for t in info["tools"]}
  sort_call = tool_call_text("sort", {"file_name": "final_report.pdf"})
  _, _, _, _, step = env.step(sort_call)
  assert step["tool_results"][0]["content"].startswith("Error: unknown function 'sort'")
  for _ in range(3):  # end turns 0, 1, 2
    obs, _, term, _, step = env.step("")
  fs_docs = bfcl_calls.load_jsonl(
    bfcl_calls.DATA_DIR / "multi_turn_func_doc" / "gorilla_file_system.json"
  )
  expected = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
    functions=[d for d in fs_docs if d["name"] == "sort"]
  )
  assert obs == expected == added_functions_message([d for d in fs_docs if d["name"] == "sort"])
  assert obs.endswith("\nI have updated some more functions you can choose from. What about now?")
  assert step["tools_added"] == ["sort"] and "tool_results" not in step and not term
  _, _, _, _, step = env.step(tool_call_text("cd", {"folder": "document"}) + sort_call)
  assert not step["tool_results"][1]["content"].startswith("Error")
  env.close()


def test_episodes_never_share_backend_state(suite):
  p = _prompt(suite, "multi_turn_base_1")
  a, b = suite.make_env(p), suite.make_env(p)
  a.reset(seed=0)
  b.reset(seed=0)
  assert a.backends.model_name != b.backends.model_name
  ls = tool_call_text("ls", {})
  a.step(tool_call_text("mkdir", {"dir_name": "only_in_a"}) + ls)
  listed_b = b.step(ls)[4]["tool_results"][0]["content"]
  listed_a = a.step(ls)[4]["tool_results"][0]["content"]
  assert "only_in_a" in listed_a and "only_in_a" not in listed_b
  prefix = a.backends.model_name + "_"
  assert _leftover(prefix)
  a.reset(seed=0)  # a new episode on the same env: fresh state, the old instances gone
  assert not _leftover(prefix)
  assert "only_in_a" not in a.step(ls)[4]["tool_results"][0]["content"]
  for env in (a, b):
    prefix = env.backends.model_name + "_"
    term = False
    while not term:
      _, _, term, _, info = env.step("")
    assert info["eval"]["valid"] is False and not _leftover(prefix)
  c = suite.make_env(p)
  c.reset(seed=0)
  prefix = c.backends.model_name + "_"
  del c
  gc.collect()
  assert not _leftover(prefix)  # an abandoned episode is cleaned up when collected


def test_step_cap_force_quits_as_bfcl(suite):
  p = _prompt(suite, "multi_turn_base_1")
  pwd = tool_call_text("pwd", {})
  env = suite.make_env(p)
  env.reset(seed=0)
  for _ in range(MAXIMUM_STEP_LIMIT):
    assert env.step(pwd)[2] is False
  _, reward, term, _, info = env.step(pwd)
  assert term and reward == 0.0
  assert info["eval"]["error_type"] == "multi_turn:force_terminated"
  # in the last turn BFCL grades what was called: the ground truth then extra pwd calls pass
  oracle = suite.oracle(p)
  obs, info = env.reset(seed=0)
  for _ in range(len(p.data["question"]) - 1):
    obs, _, _, _, info = env.step(oracle(obs, info))
    obs, _, _, _, info = env.step(oracle(obs, info))
  assert env.turn == len(p.data["question"]) - 1
  env.step(oracle(obs, info))
  for _ in range(MAXIMUM_STEP_LIMIT - 1):
    assert env.step(pwd)[2] is False
  _, reward, term, _, info = env.step(pwd)
  assert term and reward == 1.0 and info["eval"] == {"valid": True}


def test_summary_is_bfcls_unweighted_mean():
  out = summary({"multi_turn_base": [1.0, 0.0], "multi_turn_miss_func": 0.5})
  assert out["categories"] == {"multi_turn_base": 0.5, "multi_turn_miss_func": 0.5}
  assert out["multi_turn_overall"] == pytest.approx(0.25)
  assert out["missing"] == ["multi_turn_miss_param", "multi_turn_long_context"]


def test_oracle_episode_frames_under_the_qwen3_tool_template(suite):
  from spade_jax.rollout.tool_chat import ToolChatFraming
  from spade_jax.tokenizer import load_tokenizer

  tok = load_tokenizer(tiny_tokenizer_dir())
  tok.hf.chat_template = QWEN3
  framing = ToolChatFraming.from_tokenizer(tok, system=suite.system)
  assert framing.native
  p = _prompt(suite, "multi_turn_miss_func_1")
  env, oracle = suite.make_env(p), suite.oracle(p)
  obs, info = env.reset(seed=p.seed)
  tools = info["tools"]
  ids = framing.open(tok, suite.first_message(p, obs), info)
  conv = [{"role": "user", "content": suite.first_message(p, obs)}]
  term = False
  while not term:
    action = oracle(obs, info)
    before_last = ids
    ids = ids + tok.encode(action) + [framing.turn_end]
    conv.append({"role": "assistant", "content": action})
    obs, reward, term, _, info = env.step(action)
    if not term:
      fed, msgs = framing.turn(tok, obs, info)
      ids, conv = ids + fed, conv + msgs
  assert reward == 1.0
  assert before_last == framing.render_ids(tok, conv[:-1], tools)
  assert any(m["role"] == "tool" for m in conv)
  assert any(m["content"].startswith("[{'name': 'mv'") for m in conv if m["role"] == "user")
