"""Prompts of the tool-use setting: the designer's contract (its worked example is itself a valid
tool environment), difficulty and multi-instruction variants, grounding and memory, the hint
writer, and the designer's choice of prompt and hint-prompt cutting."""

import re

import pytest
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.envs.sandbox.validate import validate
from spade_jax.spade import designer as designer_lib
from spade_jax.spade import prompts, tool_prompts
from spade_jax.spade.memory import EnvRecord
from spade_jax.spade.skills import TOOL_TAXONOMY, get_skill
from spade_jax.tokenizer import load_tokenizer

SKILL = get_skill("Error Recovery")


def _user(messages):
  assert [m["role"] for m in messages] == ["system", "user"]
  return messages[1]["content"]


def test_tool_designer_prompt_minimal():
  msgs = tool_prompts.tool_designer_messages(SKILL, difficulty="hard")
  assert msgs[0]["content"] == tool_prompts.TOOL_DESIGNER_SYSTEM
  text = _user(msgs)
  assert "**Error Recovery**" in text and SKILL.description in text
  assert all(example in text for example in SKILL.examples)
  assert "Difficulty: **hard**" in text and tool_prompts.TOOL_DIFFICULTY["hard"] in text
  assert "from tool_env import ToolEnv" in text and "`json`" in text
  assert "self.instructions" not in text  # single-request variant
  assert "REFERENCE_DOCUMENT" not in text and "Earlier environments" not in text
  assert text.endswith(tool_prompts.OUTPUT_FORMAT)


def test_tool_designer_prompt_multi_instruction_document_and_memory():
  seed = EnvRecord(source="class AEnv(ToolEnv): ...", skill=SKILL.name, win_rate=0.4,
                   regret=0.3, step=2)  # fmt: skip
  bad = EnvRecord(source="class BEnv(ToolEnv): ...", skill=SKILL.name, win_rate=1.0,
                  regret=0.0, step=1)  # fmt: skip
  text = _user(
    tool_prompts.tool_designer_messages(
      SKILL,
      difficulty="easy",
      multi_instruction=True,
      document="Tide tables list high and low water times.",
      seeds=[seed],
      negative=bad,
    )
  )
  assert "self.instructions" in text and "instruction_done(self, i)" in text
  assert "<REFERENCE_DOCUMENT>\nTide tables" in text
  assert "class AEnv" in text and "win rate 0.40" in text
  assert "Avoid: too easy" in text and "class BEnv" in text
  with pytest.raises(ValueError, match="difficulty"):
    tool_prompts.tool_designer_messages(SKILL, difficulty="extreme")
  with pytest.raises(ValueError, match="at most 2"):
    tool_prompts.tool_designer_messages(SKILL, seeds=[seed] * 3)


def test_the_contracts_worked_example_is_a_valid_tool_environment():
  example = re.search(r"```python\n(.*?)```", tool_prompts.TOOL_ENV_CONTRACT, re.S).group(1)
  report = validate(example)
  assert report.valid, (report.stage, report.reason)
  assert report.kind == "tool" and report.class_name == "ShelfCountEnv"


def test_tool_hint_writer_prompt():
  msgs = tool_prompts.tool_hint_writer_messages("class XEnv(ToolEnv):\n  pass\n")
  assert msgs[0]["content"] == tool_prompts.TOOL_HINT_SYSTEM
  assert (
    "<ENVIRONMENT_SOURCE>\nclass XEnv(ToolEnv):\n  pass\n</ENVIRONMENT_SOURCE>"
    in msgs[1]["content"]
  )
  assert "<answer></answer>" in msgs[1]["content"]


def _designer(tmp_path, setting, **kw):
  tok = load_tokenizer(tiny_tokenizer_dir())
  cfg = designer_lib.DesignerConfig(setting=setting, hint_max_new_tokens=8, **kw)
  return designer_lib.Designer(None, tok, cfg, None, tmp_path, max_context=4096)


def test_designer_picks_the_settings_prompts(tmp_path):
  games = _designer(tmp_path / "g", "games")
  assert games.cfg.kind == "game"
  msgs = games.messages("Logical Deduction", None, (), None, (0, 0, 1, 0))
  assert msgs[0]["content"] == prompts.DESIGNER_SYSTEM
  tools = _designer(tmp_path / "t", "tool_use", multi_instruction=0.5)
  assert tools.cfg.kind == "tool"
  seen = set()
  for g in range(12):
    msgs = tools.messages(TOOL_TAXONOMY[0].name, None, (), None, (0, 3, g, 0))
    assert msgs[0]["content"] == tool_prompts.TOOL_DESIGNER_SYSTEM
    level = ("easy", "medium", "hard")[g % 3]  # difficulties cycle over the game slots
    assert f"Difficulty: **{level}**" in msgs[1]["content"]
    seen.add("self.instructions" in msgs[1]["content"])
  assert seen == {True, False}  # multi_instruction=0.5 mixes both variants


def test_hint_prompt_of_a_long_source_is_cut_to_fit(tmp_path):
  d = _designer(tmp_path, "tool_use")
  d.max_context = 600
  long = "\n".join(f"# line {i}: some commentary about the environment" for i in range(400))
  game = designer_lib.GameEnv(0, "Data Retrieval", long, "XEnv", "", 0, 0, kind="tool")
  msgs = d.hint_messages(game)
  n = len(d.tok.apply_chat_template(msgs))
  assert n <= 600 - 8 - 1 and "(the rest of the source is cut)" in msgs[1]["content"]
  assert msgs[0]["content"] == tool_prompts.TOOL_HINT_SYSTEM
  short = designer_lib.GameEnv(0, "Data Retrieval", "x = 1", "XEnv", "", 0, 0, kind="game")
  assert d.hint_messages(short) == prompts.hint_writer_messages("x = 1")
