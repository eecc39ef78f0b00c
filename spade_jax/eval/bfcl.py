"""BFCL-v4 multi-turn as an evaluation suite: base, miss_func, miss_param, long_context.

Each BFCL entry is one episode, played as BFCL's inference loop plays it
(``bfcl_eval.model_handler.base_handler.inference_multi_turn_prompting``, the path of the
reference's ``Qwen/Qwen3-4B-Instruct-2507-FC`` handle): the entry's user turns come one at a
time; within a turn every assistant message's ``<tool_call>`` blocks are executed against BFCL's
own backend classes (a fresh state per episode, `bfcl_calls.Backends`) and their results fed
back as tool messages; a message with no tool call ends the turn (the next user turn is the
observation). After the last turn the per-turn, per-step call lists go to BFCL's
``multi_turn_checker``: reward 1.0 if valid, else 0.0, with the trimmed verdict in
``info["eval"]``. A turn's ``MAXIMUM_STEP_LIMIT + 1``-th tool-calling message force-quits the
entry as BFCL does: before the last turn it is invalid (``multi_turn:force_terminated``, BFCL's
turn-count mismatch); in the last turn the calls so far are graded.

miss_func: functions listed in ``missed_function`` are absent from the tools until their turn,
whose question is empty; as on BFCL's prompting path (the tool block of an incremental chat
cannot change) that turn's user message is ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_
PROMPTING`` with the held-out docs, and they become callable from then on.

Deviations from BFCL (each because the harness needs it): tool calls are parsed leniently by
`envs.sandbox.tool_env.parse_tool_calls` (BFCL's Qwen decoder needs newline-delimited JSON); a
malformed or unsafe call (unknown or not-yet-added function, non-identifier argument names,
non-JSON values) is an error result fed back to the model and is neither executed nor graded
(BFCL ends the turn on an undecodable message, and would execute a held-out function called
before it is added); the turn goes on.

The category numbers are accuracies; BFCL's multi-turn overall is their unweighted mean
(`summary`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from bfcl_eval.constants.default_prompts import (
  DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING,
  MAXIMUM_STEP_LIMIT,
)

from spade_jax.envs.sandbox.tool_env import parse_tool_calls, render_observation
from spade_jax.eval.bfcl_calls import (
  CATEGORIES,
  Backends,
  backend_methods,
  call_string,
  category_entries,
  entry_functions,
  parse_call,
  tool_spec,
)
from spade_jax.eval.suite import Policy, Prompt, Sampling

ORACLE_DONE = "Done."
ORACLE_DECLINE = "I cannot do that with the functions I have."
FINISHED = "The conversation is over."


def added_functions_message(docs: list[dict]) -> str:
  """The user message of a miss_func turn that adds ``docs`` (BFCL's prompting-path text)."""
  return DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=docs)


def turn_text(messages: list[dict]) -> str:
  return "\n\n".join(str(m.get("content", "")) for m in messages)


class BfclEnv:
  """One episode of a BFCL multi-turn entry (module docstring)."""

  def __init__(self, prompt: Prompt):
    self.entry = prompt.data
    self.category = prompt.category
    self.backends: Backends | None = None
    self.done, self.verdict = False, None

  # -- protocol --------------------------------------------------------------------------------

  def reset(self, seed: int | None = None) -> tuple[str, dict]:
    self.close()
    docs, self.held = entry_functions(self.entry)
    methods = backend_methods(self.entry["involved_classes"])
    self.available = {d["name"] for d in docs if d["name"] in methods}
    self.methods = methods
    self.backends = Backends(self.entry, self.category)
    self.turn, self.steps, self.done, self.verdict = 0, 0, False, None
    self.decoded: list[list[list[str]]] = [[]]
    obs, added = self._open_turn(0)
    info = {"tools": [tool_spec(d) for d in docs], "turn": 0, "turns": self.turns}
    if added:
      info["tools_added"] = added
    return obs, info

  def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
    if self.done or self.backends is None:
      return FINISHED, 0.0, True, False, {"eval": self.verdict}
    calls = parse_tool_calls(action if isinstance(action, str) else str(action))
    if not calls:
      return self._end_turn()
    self.steps += 1
    results, info = self._run(calls), {"turn": self.turn}
    info["tool_results"] = results
    obs = render_observation(results, None)
    if self.steps > MAXIMUM_STEP_LIMIT:  # BFCL's force quit; before the last turn it fails
      verdict = None
      if self.turn + 1 < self.turns:
        verdict = {
          "valid": False,
          "error_type": "multi_turn:force_terminated",
          "error_message": f"forced to quit after {MAXIMUM_STEP_LIMIT} steps in turn {self.turn}",
        }
      self.turn = self.turns
      return self._finish(obs, info, verdict)
    return obs, 0.0, False, False, info

  def close(self) -> None:
    if self.backends is not None:
      self.backends.close()

  # -- internals -------------------------------------------------------------------------------

  @property
  def turns(self) -> int:
    return len(self.entry["question"])

  def _open_turn(self, turn: int) -> tuple[str, list[str]]:
    """The user message of ``turn`` and the names of functions added at it."""
    docs = self.held.get(turn)
    if docs is None:
      return turn_text(self.entry["question"][turn]), []
    self.available |= {d["name"] for d in docs if d["name"] in self.methods}
    return added_functions_message(docs), [d["name"] for d in docs]

  def _run(self, calls: list[dict]) -> list[dict]:
    """Tool results of one message's parsed calls; the safe ones run in order, as one step."""
    results: list[dict] = []
    strings: list[tuple[int, str]] = []
    for call in calls:
      if call["error"] is not None:
        text, error = None, f"Error: {call['error']}"
      else:
        text, error = call_string(call["name"], call["arguments"], self.available)
      results.append({"name": str(call["name"] or ""), "content": error or ""})
      if text is not None:
        strings.append((len(results) - 1, text))
    if strings:
      outputs = self.backends.run([s for _, s in strings])
      for (i, _), out in zip(strings, outputs):
        results[i]["content"] = out
      self.decoded[self.turn].append([s for _, s in strings])
    return results

  def _end_turn(self) -> tuple[str, float, bool, bool, dict]:
    self.turn += 1
    self.steps = 0
    if self.turn >= self.turns:
      return self._finish(FINISHED, {}, None)
    self.decoded.append([])
    obs, added = self._open_turn(self.turn)
    info = {"turn": self.turn}
    if added:
      info["tools_added"] = added
    return obs, 0.0, False, False, info

  def _finish(self, obs: str, info: dict, verdict: dict | None):
    """Grade (``verdict`` None: BFCL's checker on the decoded calls) and terminate."""
    while len(self.decoded) < self.turns:
      self.decoded.append([])
    if verdict is None:
      verdict = self.backends.check(self.decoded)
    self.backends.close()
    self.done, self.verdict = True, verdict
    info = dict(info, eval=verdict)
    return obs, 1.0 if verdict["valid"] else 0.0, True, False, info


class OraclePolicy:
  """Ground truth: per user turn one message with the turn's possible-answer calls as
  ``<tool_call>`` blocks, then (after their results) a plain message that ends the turn; a turn
  with an empty ground truth is answered in plain text."""

  def __init__(self, prompt: Prompt):
    methods = backend_methods(prompt.data["involved_classes"])
    self.turns = [[parse_call(c, methods) for c in calls] for calls in prompt.data["ground_truth"]]
    self.next = 0

  def __call__(self, obs: str, info: dict) -> str:
    if isinstance(info, dict) and info.get("tool_results"):
      return ORACLE_DONE
    turn, self.next = self.next, self.next + 1
    calls = self.turns[turn] if turn < len(self.turns) else []
    if not calls:
      return ORACLE_DECLINE
    return "\n".join(tool_call_text(name, args) for name, args in calls)


def tool_call_text(name: str, arguments: dict) -> str:
  """A call in the format the agent writes (Qwen's ``<tool_call>`` JSON block)."""
  body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
  return f"<tool_call>\n{body}\n</tool_call>"


class BfclSuite:
  """BFCL-v4 multi-turn (module docstring). ``categories``: which of `CATEGORIES` to include."""

  name = "bfcl_v4"
  framing = "tool"
  # the reference's Qwen FC handle sends no system prompt (the template's tool block only),
  # samples greedily (temperature 0) and caps a response at 4096 new tokens
  system = None
  max_new_tokens = 4096
  metric = "accuracy"
  sampling = Sampling(temperature=0.0, top_p=1.0, greedy=True)

  def __init__(self, categories: Sequence[str] = CATEGORIES):
    if isinstance(categories, str):
      categories = [c.strip() for c in categories.split(",") if c.strip()]
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown or not categories:
      raise ValueError(f"BFCL categories must be among {CATEGORIES}, got {list(categories)}")
    self.categories = tuple(c for c in CATEGORIES if c in categories)
    turns = max(len(e["question"]) for c in self.categories for e in category_entries(c))
    # every user turn may take BFCL's step cap of tool-calling messages plus the closing one
    self.max_turns = (MAXIMUM_STEP_LIMIT + 1) * turns

  def prompts(self) -> list[Prompt]:
    return [
      Prompt(id=e["id"], category=c, seed=0, data=e)
      for c in self.categories
      for e in category_entries(c)
    ]

  def make_env(self, prompt: Prompt) -> BfclEnv:
    return BfclEnv(prompt)

  def first_message(self, prompt: Prompt, obs: str) -> str:
    return obs

  def oracle(self, prompt: Prompt) -> Policy | None:
    return OraclePolicy(prompt)


def summary(scores_by_category: Mapping[str, Sequence[float] | float]) -> dict:
  """Per-category accuracy (a category's episode scores, or its accuracy) and BFCL's multi-turn
  overall: the unweighted mean of the four categories, a missing one counting 0 (as
  ``eval_runner_helper.calculate_unweighted_accuracy`` does)."""
  accuracy, counts = {}, {}
  for category, scores in scores_by_category.items():
    if isinstance(scores, int | float):
      accuracy[category], counts[category] = float(scores), None
    else:
      scores = [float(s) for s in scores]
      accuracy[category] = sum(scores) / len(scores) if scores else math.nan
      counts[category] = len(scores)
  missing = [c for c in CATEGORIES if c not in accuracy]
  overall = sum(accuracy.get(c, 0.0) for c in CATEGORIES) / len(CATEGORIES)
  return {
    "categories": accuracy,
    "counts": counts,
    "multi_turn_overall": overall,
    "missing": missing,
  }
