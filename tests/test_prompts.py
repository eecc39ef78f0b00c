"""Designer, hint-writer and agent prompts; hint parsing; hint attachment."""

import re

import pytest

from spade_jax.spade import prompts as P
from spade_jax.spade.memory import EnvRecord
from spade_jax.spade.skills import get_skill

SKILL = get_skill("Optimization")
SEED_A = EnvRecord("class AEnv:\n  pass  # seed A", "Optimization", 0.42, 0.31, 3)
SEED_B = EnvRecord("class BEnv:\n  pass  # seed B", "Optimization", 0.61, 0.12, 5)
EASY = EnvRecord("class EasyEnv:\n  pass", "Optimization", 0.97, 0.0, 1)


def test_designer_prompt_minimal():
  msgs = P.designer_messages(SKILL)
  assert [m["role"] for m in msgs] == ["system", "user"]
  assert "expert designer of interactive multi-turn text games" in msgs[0]["content"]
  user = msgs[1]["content"]
  assert SKILL.name in user and SKILL.description in user
  assert all(ex in user for ex in SKILL.examples)
  for piece in (
    "__init__(self, max_turns=10",
    "reset(self, seed=None)",
    "solution(self) -> str",
    "step(self, action: str)",
    "\\boxed{",
    "```python",
  ):
    assert piece in user, piece
  imports = re.search(r"Imports: only (.*?)\.", user).group(1)
  assert re.findall(r"`(\w+)`", imports) == [
    "random",
    "re",
    "math",
    "itertools",
    "collections",
    "functools",
    "string",
  ]
  assert "REFERENCE_DOCUMENT" not in user and "Avoid" not in user and "Example 1" not in user


def test_designer_prompt_with_document_seeds_and_negative():
  doc = "Dijkstra settles the closest node first."
  user = P.designer_messages(SKILL, document=doc, seeds=[SEED_A, SEED_B], negative=EASY)[1][
    "content"
  ]
  m = re.search(r"<REFERENCE_DOCUMENT>\n(.*?)\n</REFERENCE_DOCUMENT>", user, re.DOTALL)
  assert m and m.group(1) == doc
  assert "do not mention" in user.lower()
  assert user.index(SEED_A.source) < user.index(SEED_B.source)
  assert "win rate 0.42, hint regret 0.31" in user and "win rate 0.61, hint regret 0.12" in user
  assert "Avoid: too easy" in user and "0.97" in user and EASY.source in user
  assert user.rstrip().endswith(P.OUTPUT_FORMAT)
  hard = EnvRecord("class HardEnv: pass", "Optimization", 0.02, 0.0, 1)
  assert "Avoid: too hard" in P.designer_messages(SKILL, negative=hard)[1]["content"]
  assert "REFERENCE_DOCUMENT" not in P.designer_messages(SKILL, document="  ")[1]["content"]
  with pytest.raises(ValueError, match="at most 2"):
    P.designer_messages(SKILL, seeds=[SEED_A, SEED_B, SEED_A])


def test_hint_writer_prompt():
  src = "class XEnv:\n  def solution(self):\n    return '7'\n"
  msgs = P.hint_writer_messages(src)
  assert [m["role"] for m in msgs] == ["system", "user"]
  user = msgs[1]["content"]
  assert f"<ENVIRONMENT_SOURCE>\n{src.strip()}\n</ENVIRONMENT_SOURCE>" in user
  assert "1 to 3 sentences" in user and "Do not state the answer" in user
  assert "Do not mention the code" in user


@pytest.mark.parametrize(
  "raw, want",
  [
    (
      "<think>the answer is 7</think>\nHint: Use parity. Answer as \\boxed{n}. Third. Fourth.",
      "Use parity. Answer as \\boxed{n}. Third.",
    ),
    ("reasoning here...</think>  Sort the jobs by deadline.", "Sort the jobs by deadline."),
    ("Start small. <think>unfinished reasoning", "Start small."),
    (
      "**Hint:** Values like 3.5 stay whole.\n\n Give \\boxed{x}.",
      "Values like 3.5 stay whole. Give \\boxed{x}.",
    ),
    ('"Work backwards from the goal."', "Work backwards from the goal."),
    ("```\nTry halving.\n```", "Try halving."),
    ("<think>only thinking</think>", ""),
    ("   ", ""),
  ],
)
def test_parse_hint(raw, want):
  assert P.parse_hint(raw) == want


def test_parse_hint_caps_length_at_a_word_boundary():
  text = "word " * 200
  out = P.parse_hint(text, max_chars=50)
  assert len(out) <= 50 and out == " ".join(["word"] * 10)
  assert len(P.parse_hint("x" * 100, max_chars=30)) == 30
  assert P.parse_hint("A. B. C. D.", max_sentences=1) == "A."


def test_attach_hint_and_agent_messages():
  assert P.attach_hint("Find x.", "Think mod 3.") == "Find x.\n\nHINT: Think mod 3."
  plain = P.agent_messages("Find x.")
  hinted = P.agent_messages("Find x.", "Think mod 3.")
  assert plain[0] == hinted[0] and plain[0]["role"] == "system"
  assert "\\boxed{" in plain[0]["content"]
  assert plain[1] == {"role": "user", "content": "Find x."}
  assert hinted[1] == {"role": "user", "content": "Find x.\n\nHINT: Think mod 3."}
