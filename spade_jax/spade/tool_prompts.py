"""Prompts of the tool-use setting: the designer of tool environments, their hint writer, the
tool-calling agent.

* **Designer**: writes one module subclassing `ToolEnv` (the contract of docs/DESIGN.md §3.7 and
  `spade_jax.envs.sandbox.tool_env`) for one tool-use skill at one difficulty, optionally as a
  multi-instruction task in the BFCL multi-turn style (instructions revealed one at a time),
  optionally grounded in a reference document, steered by memory seeds (up to two earlier
  environments that taught well, one to avoid).
* **Hint writer**: reads a validated tool environment's source and writes a 1-3 sentence hint
  (which tools to use in which order, the answer format; never the answer). Its output goes
  through `prompts.parse_hint` like the games'.
* **Agent**: the system prompt of tool episodes; the tools themselves reach the model through the
  chat template (`rollout.tool_chat`).
"""

from __future__ import annotations

from collections.abc import Sequence

from spade_jax.spade.memory import EnvRecord
from spade_jax.spade.prompts import (
  OUTPUT_FORMAT,
  bullets,
  env_block,
  library_examples_section,
  memory_examples,
)
from spade_jax.spade.skills import Skill

DIFFICULTIES = ("easy", "medium", "hard")

TOOL_DESIGNER_SYSTEM = (
  "You are an expert designer of tool-use environments for training AI assistants. You write "
  "complete, self-contained Python simulations of a small software system (a store, a file "
  "system, a bank, a calendar, ...) whose tools an assistant must call, in the right order and "
  "with the right arguments, to carry out a user's request. Your environments are fair (every "
  "task can be done with the tools), checkable (the code knows when it is done) and need "
  "several dependent tool calls, so careful work succeeds where guessing fails."
)

TOOL_DIFFICULTY = {
  "easy": "1-2 tool calls solve the task; 3-4 tools exist, one of them not needed.",
  "medium": (
    "2-4 tool calls that depend on each other's results; 4-6 tools exist, one or two not needed."
  ),
  "hard": (
    "4 or more tool calls where order matters and later calls use earlier results; 5-8 tools "
    "exist, two or three not needed; some tool returns partial or paginated data."
  ),
}

TOOL_ENV_CONTRACT = r"""Write one Python module with exactly one class whose name ends in `Env`, subclassing `ToolEnv`:

```python
import json
import random

from tool_env import ToolEnv


class ShelfCountEnv(ToolEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.shelves = {f"S{i}": rng.randint(0, 40) for i in range(1, 6)}
        self.target = rng.choice(sorted(self.shelves))
        self.tools = {
            "list_shelves": {"description": "Names of all shelves.",
                             "parameters": {"type": "object", "properties": {}}},
            "count_items": {"description": "Number of items on a shelf.",
                            "parameters": {"type": "object",
                                           "properties": {"shelf": {"type": "string"}},
                                           "required": ["shelf"]}},
        }
        self.expected_answer = str(self.shelves[self.target])
        return f"How many items are on shelf {self.target}? Reply <answer>N</answer>.", {}

    def tool_list_shelves(self):
        return ", ".join(sorted(self.shelves))

    def tool_count_items(self, shelf):
        if shelf not in self.shelves:
            return f"Error: no shelf named {shelf}"
        return str(self.shelves[shelf])

    def solution(self):
        call = {"name": "count_items", "arguments": {"shelf": self.target}}
        return [f"<tool_call>{json.dumps(call)}</tool_call>",
                f"<answer>{self.expected_answer}</answer>"]
```

What you implement (`ToolEnv` does everything else: parsing `<tool_call>` JSON, calling your tools, checking `<answer>`, format errors, counting turns; do NOT write `step()` or `__init__()`):

- `reset(self, seed=None)`: draw the task and all data from `random.Random(seed)` (the same seed must give the same task); set the backend state as attributes; set `self.tools` to a dict mapping each tool name to `{"description": str, "parameters": JSON-schema object}`; set `self.expected_answer` to the exact answer string, or to `None` when only the final state is graded; return `(user_request, {})` where the request states the whole task and how to answer (`<answer>...</answer>`).
- One method `tool_<name>(self, ...)` per key of `self.tools`, with parameters named exactly as in its schema, returning a string. A call with bad arguments or unmet preconditions returns an error message string; it never raises.
- `goal_reached(self)` (optional): True when the backend state is what the task asked for.
- `solution(self)`: the list of assistant turns that solve the current task, in order: turns of `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (several calls may share one turn) and a final `<answer>...</answer>`.

Rules the environment is checked against before it is used:

- Imports: only `random`, `re`, `math`, `itertools`, `collections`, `functools`, `string`, `json` and `from tool_env import ToolEnv`. No files, network, processes, clocks or printing.
- Replaying `solution()` turn by turn right after `reset` must earn reward 1.0 within `max_turns` turns, on every seed.
- The same seed must give the same request, tools and solution; tools are deterministic (no randomness inside tool methods).
- The request must not contain the answer: the assistant has to call tools to find it.
- Every tool must answer quickly, and must return a string even for nonsense arguments."""

MULTI_INSTRUCTION = r"""## Multi-instruction task

Make this a multi-turn task, the way a real user works: several short, atomic instructions given one at a time, each revealed only after the previous one is done.

- In `reset`, set `self.instructions` to a list of 3 to 5 instructions (1-2 sentences each, each needing at least one state-changing tool call) and return `self.instructions[0]` as the request.
- Define `instruction_done(self, i)`: True when instruction `i` is satisfied by the backend state (check the state, not which tools were called). No instruction may be satisfied before the assistant acts.
- Every value an instruction needs (an id, an amount, a name) is either stated in its words or readable through a tool.
- Set `self.expected_answer = "done"`; the final turn of `solution()` is `<answer>done</answer>`, after tool calls that satisfy every instruction in order."""

TOOL_HINT_SYSTEM = (
  "You write short hints for assistants that must complete tasks by calling tools. A good hint "
  "says which tools matter and in which order, and how the answer must be written; it never "
  "gives the answer away."
)

TOOL_AGENT_SYSTEM = (
  "You are an assistant that completes the user's request by calling the tools provided. Call "
  'a tool with <tool_call>{"name": "tool_name", "arguments": {...}}</tool_call>; you may call '
  "several tools in one reply, and you will see their results. Use the results to decide what "
  "to do next. When the request is complete, reply with the final answer as "
  "<answer>...</answer> and no tool call."
)


def tool_designer_messages(
  skill: Skill,
  *,
  difficulty: str = "medium",
  multi_instruction: bool = False,
  document: str | None = None,
  seeds: Sequence[EnvRecord] = (),
  negative: EnvRecord | None = None,
) -> list[dict]:
  """Designer prompt for one tool environment of ``skill`` at ``difficulty``.

  multi_instruction: ask for the BFCL multi-turn structure (instructions revealed one by one).
  document: optional grounding text in ``<REFERENCE_DOCUMENT>`` tags: the environment's domain
    comes from it, and its text never mentions it.
  seeds / negative: memory, as in the games' designer prompt.
  """
  if difficulty not in TOOL_DIFFICULTY:
    raise ValueError(f"difficulty={difficulty!r}; expected one of {DIFFICULTIES}")
  if len(seeds) > 2:
    raise ValueError(f"designer prompt takes at most 2 memory seeds, got {len(seeds)}")
  parts = [
    f"Design a new tool-use environment that trains the skill **{skill.name}**.",
    skill.description,
    "Task ideas for this skill (inspiration, not a list to copy):\n" + bullets(skill.examples),
    f"Difficulty: **{difficulty}**. {TOOL_DIFFICULTY[difficulty]}",
    "## Environment contract\n\n" + TOOL_ENV_CONTRACT,
  ]
  if multi_instruction:
    parts.append(MULTI_INSTRUCTION)
  if document is not None and document.strip():
    parts.append(
      "## Reference document\n\n<REFERENCE_DOCUMENT>\n"
      + document.strip()
      + "\n</REFERENCE_DOCUMENT>\n\n"
      "Set the environment in the domain of this document: its tools and data relate to it. "
      "The assistant never sees the document: the request and tool results must not mention, "
      "quote or refer to it."
    )
  if seeds and any(r.is_seed for r in seeds):
    parts.append(library_examples_section(seeds, "environment"))
  elif seeds:
    shown = memory_examples(seeds)
    parts.append(
      "## Earlier environments that taught well\n\n"
      "The assistant completed these only some of the time, and a hint helped it noticeably. "
      "Aim for the same zone with a new domain and task; do not copy them.\n\n" + shown
    )
  if negative is not None:
    label = negative.too_easy_or_hard
    parts.append(
      f"## Avoid: {label}\n\n"
      f"The assistant's win rate on this earlier environment was {negative.win_rate:.2f}, so it "
      f"was {label} to teach anything. Do not write one like it.\n\n" + env_block(negative)
    )
  parts.append("## Output\n\n" + OUTPUT_FORMAT)
  return [
    {"role": "system", "content": TOOL_DESIGNER_SYSTEM},
    {"role": "user", "content": "\n\n".join(parts)},
  ]


def tool_hint_writer_messages(source: str) -> list[dict]:
  """Hint-writer prompt for a tool environment: its source in ``<ENVIRONMENT_SOURCE>`` tags."""
  user = (
    "Below is the source code of a simulated system whose tools an assistant must call to "
    "complete a request. The assistant sees only the request, the tool descriptions and the "
    "tool results, never this code.\n\n<ENVIRONMENT_SOURCE>\n" + source.strip() + "\n"
    "</ENVIRONMENT_SOURCE>\n\n"
    "Write a hint for the assistant in 1 to 3 sentences: which tools to call in which order "
    "(and what to look for in their results) for requests of this kind, and how the final "
    "answer must be written inside <answer></answer>. Do not state the answer or any value of "
    "a particular task. Do not mention the code, its classes, methods, attributes or seeds. "
    "Reply with the hint only."
  )
  return [{"role": "system", "content": TOOL_HINT_SYSTEM}, {"role": "user", "content": user}]
