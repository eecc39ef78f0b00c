"""Tool-use chat framing: token stream equals the template's tokenisation of the whole
conversation (Qwen3's native tool template and the Qwen-style fallback on plain ChatML), the
Qwen3 tool-call format parses back through `tool_env.parse_tool_calls`, and `host.play` runs tool
episodes (transcripts, counters, loss masks)."""

from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.engine.generate import Engine
from spade_jax.envs.sandbox import tool_env
from spade_jax.envs.sandbox.tool_env import ToolEnv, parse_tool_calls, tool_specs
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rollout import host as host_rollout
from spade_jax.rollout.chat import ChatFraming, FramingError
from spade_jax.rollout.tool_chat import ToolChatFraming, tools_system_text
from spade_jax.rollout.types import ScriptedPolicy
from spade_jax.tokenizer import load_tokenizer

QWEN3 = (Path(__file__).parent / "fixtures" / "chat_templates" / "qwen3.jinja").read_text()
SYSTEM = "You solve tasks with tools. Finish with <answer>...</answer>."
TOOLS = tool_specs(
  {
    "add": {
      "description": "Adds two integers.",
      "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
      },
    },
    "lookup": {"description": "Looks up a name (ünï)."},
  }
)


def _tok(kind: str):
  tok = load_tokenizer(tiny_tokenizer_dir())  # a fresh copy: the template is set on it alone
  if kind == "qwen3":
    tok.hf.chat_template = QWEN3
  return tok


@pytest.fixture(scope="module", params=["qwen3", "chatml"])
def tok(request):
  return _tok(request.param)


def _call(name, args) -> str:
  import json

  return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


# (assistant text, step info, observation, whether the turn ended with its end token)
TURNS = [
  (_call("add", {"a": 2, "b": 3}), {"tool_results": [{"name": "add", "content": "5"}]}, "", True),
  (
    "I add twice.\n" + _call("add", {"a": 5, "b": 4}) + "\n" + _call("lookup", {"q": "x"}),
    {
      "tool_results": [
        {"name": "add", "content": "9"},
        {"name": "lookup", "content": "Error: wrong arguments for tool 'lookup'"},
      ],
      "user_message": "Now multiply the result by 2.",
    },
    "",
    True,
  ),
  ("<answer>18", {"tool_results": []}, tool_env.FORMAT_ERROR_TEXT, False),  # cut off
  (
    _call("add", {"a": 9, "b": 9}) + " and",
    {"tool_results": [{"name": "add", "content": "18"}]},
    "",
    False,
  ),
  ("<answer>17</answer>", {"tool_results": []}, "Incorrect answer: '17'.", True),
]


def _template_conv(framing, system, tools, conv):
  """The whole conversation as the template sees it (written out independently of the
  framing): native tool messages, or the fallback's system text and tool-response user turns."""
  if framing.native:
    return ([{"role": "system", "content": system}] if system else []) + conv, {"tools": tools}
  text = tools_system_text(system, tools)
  out = [{"role": "system", "content": text}] if text is not None else []
  run = []
  for m in [*conv, None]:
    if m is not None and m["role"] == "tool":
      run.append(m["content"])
      continue
    if run:
      blocks = [f"<tool_response>\n{c}\n</tool_response>" for c in run]
      out.append({"role": "user", "content": "\n".join(blocks)})
      run = []
    if m is not None:
      out.append(m)
  return out, {}


@pytest.mark.parametrize("system", [None, SYSTEM])
@pytest.mark.parametrize("tools", [TOOLS, []])
def test_framing_equals_the_templates_tokenisation(tok, system, tools):
  framing = ToolChatFraming.from_tokenizer(tok, system=system)
  assert framing.native == ("<tools>" in tok.hf.chat_template)
  first = "Add 2 and 3 with the tools."
  ids, conv = framing.open(tok, first, {"tools": tools}), [{"role": "user", "content": first}]
  msgs, kw = _template_conv(framing, system, tools, conv)
  assert ids == tok.apply_chat_template(msgs, **kw)
  for k, (answer, info, obs, ended) in enumerate(TURNS):
    fb, fmsgs = framing.turn(tok, obs, info, ended_with_turn_end=ended)
    ids = ids + tok.encode(answer) + ([framing.turn_end] if ended else []) + fb
    conv = conv + [{"role": "assistant", "content": answer}, *fmsgs]
    msgs, kw = _template_conv(framing, system, tools, conv)
    assert ids == tok.apply_chat_template(msgs, **kw), f"turn {k}"
    if not ended:
      assert fb[0] == framing.turn_end
  roles = [m["role"] for m in conv]
  assert roles[:5] == ["user", "assistant", "tool", "assistant", "tool"]
  assert roles[5:7] == ["tool", "user"] and conv[6]["content"] == "Now multiply the result by 2."
  assert conv[8] == {"role": "user", "content": tool_env.FORMAT_ERROR_TEXT}
  assert conv[2] == {"role": "tool", "name": "add", "content": "5"}


def test_fallback_speaks_qwens_format():
  """On plain ChatML the fallback renders the same text Qwen3's template renders natively."""
  chatml, qwen = _tok("chatml"), _tok("qwen3")
  fc, fq = (
    ToolChatFraming.from_tokenizer(chatml, SYSTEM),
    ToolChatFraming.from_tokenizer(qwen, SYSTEM),
  )
  assert not fc.native and fq.native
  ids_c, ids_q = fc.open(chatml, "go", {"tools": TOOLS}), fq.open(qwen, "go", {"tools": TOOLS})
  for answer, info, obs, ended in TURNS:
    ids_c += chatml.encode(answer) + fc.turn(chatml, obs, info, ended_with_turn_end=ended)[0]
    ids_q += qwen.encode(answer) + fq.turn(qwen, obs, info, ended_with_turn_end=ended)[0]
  assert ids_c == ids_q


def test_smollm2_uses_the_fallback():
  tok = load_tokenizer("smollm2")
  framing = ToolChatFraming.from_tokenizer(tok, system=SYSTEM)
  assert not framing.native
  text = tok.decode(framing.open(tok, "go", {"tools": TOOLS}))
  assert "<tools>\n" + '{"type": "function", "function": {"name": "add"' in text
  fb, _ = framing.turn(tok, "", TURNS[1][1])
  assert tok.decode(fb).startswith("\n<|im_start|>user\n<tool_response>\n9\n</tool_response>\n")


def test_template_that_rerenders_history_is_refused():
  tok = _tok("chatml")
  # numbers every message by the conversation's length: appending a turn changes earlier text
  tok.hf.chat_template = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + ' ' "
    "+ (messages|length)|string + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
  )
  with pytest.raises(FramingError, match="cannot be framed"):
    ToolChatFraming.from_tokenizer(tok)


def _assistant_text(tok, message) -> str:
  text = tok.render_chat(
    [{"role": "user", "content": "go"}, message], add_generation_prompt=False, tools=TOOLS
  )
  return text.split("<|im_start|>assistant\n", 1)[1].rsplit("<|im_end|>", 1)[0]


@pytest.mark.parametrize(
  "calls",
  [
    [("add", {"a": 2, "b": -3})],
    [("add", {"a": 1, "b": 2}), ("lookup", {"q": 'ünï "x"', "n": [1, {"k": None}]}), ("noop", {})],
  ],
)
def test_qwen3_tool_calls_parse_back(calls):
  tok = _tok("qwen3")
  tool_calls = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
  for content in ("", "Let me call the tools."):
    text = _assistant_text(tok, {"role": "assistant", "content": content, "tool_calls": tool_calls})
    assert text.startswith("<think>")  # the last assistant turn gets an (empty) thinking block
    parsed = parse_tool_calls(text)
    assert [(c["name"], c["arguments"], c["error"]) for c in parsed] == [
      (n, a, None) for n, a in calls
    ]


def test_qwen3_malformed_call_is_an_error_entry():
  tok = _tok("qwen3")
  tool_calls = [
    {"type": "function", "function": {"name": "add", "arguments": {"a": 1}}},
    {"type": "function", "function": {"name": "add", "arguments": '{"a": 1,'}},  # string, broken
  ]
  text = _assistant_text(tok, {"role": "assistant", "content": "", "tool_calls": tool_calls})
  parsed = parse_tool_calls(text)
  assert parsed[0] == {"name": "add", "arguments": {"a": 1}, "error": None}
  assert parsed[1]["name"] is None and "not valid JSON" in parsed[1]["error"]


def test_chat_framing_open_and_turn_are_the_game_framing():
  tok = _tok("chatml")
  framing = ChatFraming.from_tokenizer(tok)
  assert framing.open(tok, "hi", {"tools": TOOLS}) == framing.first_prompt(tok, "hi")
  fb, msgs = framing.turn(tok, "Too low.", {"tool_results": [{"name": "a", "content": "b"}]})
  assert fb == framing.feedback(tok, "Too low.") and msgs == [
    {"role": "user", "content": "Too low."}
  ]
  res = host_rollout.EpisodeResult(
    [[1], [2]], [[0], [0]], [[0.0]] * 2, *[np.zeros(2)] * 6, [None] * 2, [[]] * 2
  )
  assert res.tool_calls.tolist() == [0, 0] and res.format_errors.dtype == np.int32


# -- host.play over a trusted in-process tool environment --------------------------------------


class Adder(ToolEnv):
  """Two instructions (add 2 and 3, then add 4), answer 9."""

  def reset(self, seed=None):
    self.tools = {
      "add": {
        "description": "Adds two integers.",
        "parameters": {
          "type": "object",
          "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        },
      }
    }
    self.instructions = ["Add 2 and 3.", "Now add 4 to the result."]
    self.expected_answer = "9"
    self.total = 0
    return f"Task {seed}: {self.instructions[0]}", {}

  def tool_add(self, a, b):
    self.total = a + b
    return str(self.total)

  def instruction_done(self, i):
    return self.total == (5, 9)[i]

  def solution(self):
    return [_call("add", {"a": 2, "b": 3}), _call("add", {"a": 5, "b": 4}), "<answer>9</answer>"]


MAX_NEW = 128
SCRIPTS = [
  # solves it: a call, two calls (one malformed), a format error, the answer
  [
    _call("add", {"a": 2, "b": 3}),
    _call("add", {"a": 5, "b": 4}) + "<tool_call>{bad</tool_call>",
    "hmm",
    "<answer>9</answer>",
  ],
  [],  # the random model: format errors until the environment's turn limit
  # a call whose turn is cut off by the token budget, then the random model
  [_call("add", {"a": 2, "b": 3}) + " " + "la " * 60],
]


@pytest.fixture(scope="module")
def model():
  tok = _tok("qwen3")
  cfg = TransformerConfig(
    vocab_size=tok.vocab_size,
    embed_dim=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    mlp_dim=64,
    qk_norm=True,
    model_type="qwen3",
  )
  return Transformer(cfg, rngs=nnx.Rngs(0))


def _runs(tokens, mask):
  """(sampled runs, forced runs) of a token stream that starts with a sampled turn."""
  runs = {0: [], 1: []}
  for j, (t, m) in enumerate(zip(tokens, mask)):
    if j == 0 or m != mask[j - 1]:
      runs[m].append([])
    runs[m][-1].append(t)
  return runs[1], runs[0]


@pytest.mark.parametrize("kind", ["qwen3", "chatml"])
def test_play_tool_episodes(model, kind):
  tok = _tok(kind)
  framing = ToolChatFraming.from_tokenizer(tok, system=SYSTEM)
  scripts = [[tuple(tok.encode(t)) for t in s] for s in SCRIPTS]
  width = max(len(t) for s in scripts for t in s)
  engine = Engine(model, processor=ScriptedPolicy(framing.turn_end, 4, width, scripts=scripts))
  envs = host_rollout.LocalEnvBatch([Adder(max_turns=5) for _ in SCRIPTS])
  cfg = host_rollout.RolloutConfig(max_turns=6, max_new_tokens=MAX_NEW, max_context=3072)
  res = host_rollout.play(engine, tok, framing, envs, [1, 2, 3], lambda i, o: o, cfg, seed=0)

  assert not res.crashed.any()
  assert res.terminated.tolist() == [True, False, False] and res.reward.tolist() == [1.0, 0, 0]
  assert res.turns.tolist() == [4, 5, 5] and res.truncated.tolist() == [False, True, True]
  assert res.tool_calls.tolist() == [3, 0, 1] and res.tool_errors.tolist() == [1, 0, 0]
  assert res.format_errors.tolist() == [1, 5, 4]

  t0 = res.transcripts[0]
  assert [m["role"] for m in t0] == [
    "user", "assistant", "tool", "user", "assistant", "tool", "tool", "assistant", "user",
    "assistant",
  ]  # fmt: skip
  assert t0[0]["content"] == "Task 1: Add 2 and 3." and t0[1]["content"] == SCRIPTS[0][0]
  assert t0[2] == {"role": "tool", "name": "add", "content": "5"}
  assert t0[3] == {"role": "user", "content": "Now add 4 to the result."}
  assert t0[5]["content"] == "9" and "not valid JSON" in t0[6]["content"]
  assert t0[8] == {"role": "user", "content": tool_env.FORMAT_ERROR_TEXT}
  assert t0[9]["content"] == "<answer>9</answer>"

  tools = tool_specs(Adder().tools)
  for i in range(3):
    toks, mask = res.tokens[i], res.loss_mask[i]
    prompt = framing.open(tok, f"Task {i + 1}: Add 2 and 3.", {"tools": tools})
    assert toks[: len(prompt)] == prompt and not any(mask[: len(prompt)])
    sampled, forced = _runs(toks[len(prompt) :], mask[len(prompt) :])
    assert len(sampled) == res.turns[i] and len(forced) == res.turns[i] - 1
    for k, script in enumerate(scripts[i]):  # scripted turns: loss mask 1, script + end token
      want = list(script[:MAX_NEW]) + ([framing.turn_end] if len(script) < MAX_NEW else [])
      assert sampled[k] == want, (i, k)
    # every forced run is the framing of the transcript's feedback messages after that turn
    groups, cur = [], None
    for m in res.transcripts[i][1:]:
      if m["role"] == "assistant":
        cur = []
        groups.append(cur)
      else:
        cur.append(m)
    assert len(groups) == res.turns[i] and groups[-1] == []
    for run, fb, msgs in zip(sampled, forced, groups):
      ended = run[-1] in tok.eos_ids
      assert fb == framing.feedback(tok, msgs, ended_with_turn_end=ended)
  # the cut-off turn: a tool result, and the forced feedback starts with the end-of-turn token
  _, forced = _runs(res.tokens[2][len(prompt) :], res.loss_mask[2][len(prompt) :])
  assert forced[0][0] == framing.turn_end and res.transcripts[2][2]["content"] == "5"
  # the solved episode, up to its last turn, is the template's tokenisation of its transcript
  runs, _ = _runs(res.tokens[0], res.loss_mask[0])
  msgs, kw = _template_conv(framing, SYSTEM, tools, res.transcripts[0][:-1])
  assert res.tokens[0][: -len(runs[-1])] == tok.apply_chat_template(msgs, **kw)


def test_malformed_step_info_is_shown_not_raised():
  tok = _tok("qwen3")
  framing = ToolChatFraming.from_tokenizer(tok)
  _, msgs = framing.turn(tok, "obs", {"tool_results": ["x", {"name": None, "content": 3}]})
  assert msgs == [{"role": "tool", "name": "", "content": "x"}, _tool_msg("3")]
  assert framing.turn(tok, 7, {"tool_results": "nope"})[1] == [{"role": "user", "content": "7"}]
  assert framing.open(tok, "go", {"tools": "nope"}) == framing.open(tok, "go", None)


def _tool_msg(content, name=""):
  return {"role": "tool", "name": name, "content": content}
