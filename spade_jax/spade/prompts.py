"""Prompts of the three roles the one policy plays, as chat message lists.

* **Designer**: writes a complete Python environment (the contract of docs/DESIGN.md §3.6) for one
  cognitive skill, optionally grounded in a reference document and steered by memory: up to two
  earlier environments that sat in the agent's learning zone, and one it found too easy or too
  hard.
* **Hint writer**: reads a validated environment's source and writes a 1-3 sentence hint (the key
  insight and the answer format; never the answer, never code internals). Its output goes
  through :func:`parse_hint`.
* **Agent**: plays the game, answering in ``\\boxed{}``; the hint, when given, is appended to the
  first observation by :func:`attach_hint`.

Messages are ``{"role": "system" | "user", "content": str}`` dicts for the tokenizer's chat
template. Extracting code from the designer's reply belongs to the validator's ``extract``
stage (``spade_jax.envs.sandbox.validate``), not here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from spade_jax.spade.memory import EnvRecord
from spade_jax.spade.skills import Skill

DESIGNER_SYSTEM = (
  "You are an expert designer of interactive multi-turn text games. You write complete, "
  "self-contained Python environments in which a player solves one task per episode over "
  "several turns, guided by precise feedback. Your games are fair (every task can be solved), "
  "checkable (there is exactly one correct answer and the code knows it) and pitched so that "
  "careful reasoning succeeds where guessing fails."
)

ENV_CONTRACT = r"""Write one Python module that defines exactly one class whose name ends in `Env`, with:

- `__init__(self, max_turns=10, **kwargs)`: store `max_turns`, set up every attribute the game uses, then call `self.reset()`.
- `reset(self, seed=None) -> tuple[str, dict]`: start a new episode with a single task. Seed the `random` module with `seed` (e.g. `random.seed(seed)`) and draw the task from it, so the same seed always gives the same task. Return the first observation, a non-empty string that states the whole task and tells the player to answer in `\boxed{...}`, and an info dict.
- `solution(self) -> str`: the correct answer to the current task, written exactly as it must appear inside `\boxed{}`.
- `step(self, action: str) -> tuple[str, float, bool, bool, dict]`: `action` is the player's whole message; read the answer from the last `\boxed{...}` in it. A correct answer gives reward 1.0 and `terminated=True`. A wrong or missing answer gives specific feedback that helps without giving the answer away, a reward in [-1, 1] below 1.0 (usually 0.0), and `terminated=False`; once `max_turns` answers have been used, set `truncated=True`. Return `(observation, reward, terminated, truncated, info)` with `info` a dict.

Rules the environment is checked against before it is used:

- Imports: only `random`, `re`, `math`, `itertools`, `collections`, `functools` and `string`. No files, network, processes, clocks, `input()` or printing.
- Answering `\boxed{` + `solution()` + `}` right after `reset` must earn reward 1.0 on every seed.
- The same seed must give the same observation and the same solution.
- The observation must not contain the answer.
- Every call must finish quickly; no unbounded loops."""

OUTPUT_FORMAT = (
  "Reply with the complete module in a single fenced ```python code block. Put nothing after "
  "the block."
)

# Reply prefixes (`DesignerConfig.reply_prefix`, config `designer.reply_prefix`): fixed openings
# of the game designer's reply, the same for every skill, that sampling continues; the extracted
# source is prefix + sample. Measured with SmolLM2-135M-Instruct in BUILD_NOTES.md (issue 29).
# "class": a fence, the imports and `class`, so the model writes a class, not helper functions.
GAME_REPLY_CLASS = "```python\nimport random\nimport re\n\n\nclass"
# "helpers": the same with the library twins' answer parser first (`_BOXED`, `_INTS`,
# `NO_ANSWER`, `_boxed_ints`, exactly as every twin defines them): the twins the prompt shows call
# `_boxed_ints(action)` and `NO_ANSWER`, which a class copied after GAME_REPLY_CLASS leaves
# undefined; this parser is the one the translator recognises as the device's own
# (`envs.translate.answers.reference_parser`), so an environment written after it can be put on
# device (tests/test_designer_prefix.py); its two-space body also sets the indentation the twins
# use.
GAME_REPLY_HELPERS = r'''```python
import random
import re

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_INTS = re.compile(
  r"[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*(?:,[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*)*"
)
NO_ANSWER = "No answer found. Put your final answer in \\boxed{}."


def _boxed_ints(action):
  """The ints in the last \\boxed{...} of ``action`` (at most 12, each a 32-bit int), or None."""
  found = _BOXED.findall(action)
  if not found or not _INTS.fullmatch(found[-1]):
    return None
  vals = [int(v) for v in re.findall(r"-?[0-9]+", found[-1])]
  if len(vals) > 12 or any(not -(2**31) <= v < 2**31 for v in vals):
    return None
  return vals


class'''
REPLY_PREFIXES = {"none": "", "class": GAME_REPLY_CLASS, "helpers": GAME_REPLY_HELPERS}

HINT_SYSTEM = (
  "You write short hints for players of text games. A good hint names the idea that makes the "
  "task tractable and says how the answer must be written; it never gives the answer away."
)

AGENT_SYSTEM = (
  "You are playing an interactive text game. Read each message from the game carefully and "
  "reason step by step. Give your answer as \\boxed{your answer}; only the last \\boxed{} in your "
  "reply counts. If the game tells you the answer was wrong, use its feedback and try again."
)


def bullets(items: Sequence[str]) -> str:
  """A markdown bullet list."""
  return "\n".join(f"- {x}" for x in items)


def env_block(rec: EnvRecord) -> str:
  """A memory record's source as a fenced python block."""
  return f"```python\n{rec.source.rstrip()}\n```"


def _example_label(rec: EnvRecord) -> str:
  if rec.is_seed:
    return "a working library environment"
  return f"agent win rate {rec.win_rate:.2f}, hint regret {rec.regret:.2f}"


def memory_examples(seeds: Sequence[EnvRecord]) -> str:
  """Memory seeds as numbered examples with their win rate and regret (both settings); a
  library seed is labelled as such."""
  return "\n\n".join(
    f"Example {i + 1} ({_example_label(r)}):\n" + env_block(r) for i, r in enumerate(seeds)
  )


def library_examples_section(seeds: Sequence[EnvRecord], noun: str) -> str:
  """The prompt section of memory seeds that include library seeds (``noun``: "game" or
  "environment"): worked examples of the contract, not records of the agent's learning zone."""
  earlier = any(not r.is_seed for r in seeds)
  return (
    f"## Example {noun}s\n\n"
    f"These {noun}s meet every rule above"
    + (
      " (the ones with a win rate were written earlier and sat at the edge of the agent's ability)"
      if earlier
      else ""
    )
    + f". Write a new {noun} for this skill with its own task; do not copy them.\n\n"
    + memory_examples(seeds)
  )


def designer_messages(
  skill: Skill,
  *,
  document: str | None = None,
  seeds: Sequence[EnvRecord] = (),
  negative: EnvRecord | None = None,
) -> list[dict]:
  """Designer prompt for one game of ``skill``.

  document: optional grounding text, placed in ``<REFERENCE_DOCUMENT>`` tags; the game must use a
    concept from it without mentioning it.
  seeds: up to 2 earlier environments from memory with high regret in the learnable band, or
    library seeds (`EnvMemory.add_seed`) while the memory has too few of those.
  negative: at most 1 environment to steer away from (too easy or too hard).
  """
  if len(seeds) > 2:
    raise ValueError(f"designer prompt takes at most 2 memory seeds, got {len(seeds)}")
  parts = [
    f"Design a new game that trains the skill **{skill.name}**.",
    skill.description,
    "Concepts a game for this skill could build on (inspiration, not a list to copy):\n"
    + bullets(skill.examples),
    "## Environment contract\n\n" + ENV_CONTRACT,
  ]
  if document is not None and document.strip():
    parts.append(
      "## Reference document\n\n<REFERENCE_DOCUMENT>\n"
      + document.strip()
      + "\n</REFERENCE_DOCUMENT>\n\n"
      "Build the game's central mechanic on a concept taken from this document. The player "
      "never sees the document: do not mention, quote or refer to it in the game's text."
    )
  if seeds and any(r.is_seed for r in seeds):
    parts.append(library_examples_section(seeds, "game"))
  elif seeds:
    shown = memory_examples(seeds)
    parts.append(
      "## Earlier games that taught well\n\n"
      "The agent solved these only some of the time, and a hint helped it noticeably: they sat "
      "at the edge of its ability. Aim for the same zone with a new game; do not copy them.\n\n"
      + shown
    )
  if negative is not None:
    label = negative.too_easy_or_hard
    parts.append(
      f"## Avoid: {label}\n\n"
      f"The agent's win rate on this earlier game was {negative.win_rate:.2f}, so it was "
      f"{label} to teach anything. Do not write a game like it.\n\n" + env_block(negative)
    )
  parts.append("## Output\n\n" + OUTPUT_FORMAT)
  return [
    {"role": "system", "content": DESIGNER_SYSTEM},
    {"role": "user", "content": "\n\n".join(parts)},
  ]


def hint_writer_messages(source: str) -> list[dict]:
  """Hint-writer prompt: the environment's source in ``<ENVIRONMENT_SOURCE>`` tags."""
  user = (
    "Below is the source code of a text game. A player will see only the game's messages, "
    "never this code.\n\n<ENVIRONMENT_SOURCE>\n" + source.strip() + "\n</ENVIRONMENT_SOURCE>\n\n"
    "Write a hint for the player in 1 to 3 sentences: the key insight or method that solves "
    "tasks of this kind, and the exact format the answer must take inside \\boxed{}. Do not "
    "state the answer or any value of a particular task. Do not mention the code, its "
    "classes, methods, variables, seeds or internal checks. Reply with the hint only."
  )
  return [{"role": "system", "content": HINT_SYSTEM}, {"role": "user", "content": user}]


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_LABEL = re.compile(r"^\s*(\*\*)?hint(\*\*)?\s*[:\-]\s*(\*\*)?", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def parse_hint(text: str, max_sentences: int = 3, max_chars: int = 400) -> str:
  """The hint in a hint-writer reply: reasoning blocks removed (``<think>...</think>``; text
  before a lone ``</think>``; everything after an unclosed ``<think>``), code-fence markers and
  a leading "Hint:" label dropped, whitespace collapsed, then cut to the first
  ``max_sentences`` sentences and at most ``max_chars`` characters (at a word boundary).
  Returns "" when nothing usable remains."""
  text = _THINK_BLOCK.sub(" ", text)
  if "</think>" in text:
    text = text.rsplit("</think>", 1)[1]
  if "<think>" in text:
    text = text.split("<think>", 1)[0]
  text = text.replace("```", " ")
  text = " ".join(text.split())
  text = _LABEL.sub("", text).strip().strip("\"'").strip()
  sentences = _SENTENCE_END.split(text) if text else []
  text = " ".join(sentences[:max_sentences])
  if len(text) > max_chars:
    cut = text[: max_chars + 1].rsplit(" ", 1)[0] if " " in text[:max_chars] else ""
    text = (cut or text[:max_chars]).rstrip()
  return text


def attach_hint(obs: str, hint: str) -> str:
  """First observation of a hinted play."""
  return f"{obs}\n\nHINT: {hint}"


def agent_messages(observation: str, hint: str | None = None) -> list[dict]:
  """Opening of an agent episode: the instruction preamble and the first observation (with the
  hint appended for hinted plays)."""
  first = attach_hint(observation, hint) if hint else observation
  return [{"role": "system", "content": AGENT_SYSTEM}, {"role": "user", "content": first}]
