"""What an evaluation suite is: prompts, a fresh environment per episode, an optional oracle.

Every suite (BFCL-v4 multi-turn, Reasoning-Gym hard buckets, the held-out library games and
tool environments) is played the way training plays environments: a gym-style environment per
episode (``reset(seed) -> (obs, info)``, ``step(text) -> (obs, reward, terminated, truncated,
info)``), driven either by the model (`eval.players.ModelPlayer`, the sampler and
`rollout.host.play`) or by a scripted policy (`eval.players.ScriptedPlayer`: the suite's
ground-truth oracle, or the empty policy). The framing says how the model sees it: ``"chat"``
(observations as user messages, `rollout.chat.ChatFraming`) or ``"tool"`` (reset info's
``tools`` in the template, step info's ``tool_results`` as tool messages,
`rollout.tool_chat.ToolChatFraming`).

An episode's **score** is its terminal reward clipped to [0, 1] (0 when it never terminated);
an environment reports what the grader said in its final step info under ``"eval"`` (a
JSON-able dict, written to the episode's record). Suites group prompts by ``category``: the
unit a paper table reports (a BFCL category, an RG bucket, a library family or domain).

Benchmark environments are trusted code (they run in-process); anything a model writes reaches
them only as text they parse. Model-written *environments* never appear here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

# (obs, info) of the step just taken (the reset's on the first call) -> the policy's next turn
Policy = Callable[[str, dict], str]


@dataclasses.dataclass(frozen=True)
class Sampling:
  """A suite's default sampling for the model policy (the CLI may override it)."""

  temperature: float = 0.6
  top_p: float = 0.95
  top_k: int = 20
  greedy: bool = False


@dataclasses.dataclass(frozen=True)
class Prompt:
  """One evaluation item. ``id`` is stable across runs (it keys records and paired
  comparisons); ``seed`` is the environment's reset seed for every sample of this prompt."""

  id: str
  category: str
  seed: int = 0
  data: Any = dataclasses.field(default=None, compare=False, repr=False)


class Env(Protocol):
  def reset(self, seed: int | None = None) -> tuple[str, dict]: ...

  def step(self, action: str) -> tuple[str, float, bool, bool, dict]: ...


class Suite(Protocol):
  """An evaluation suite (module docstring)."""

  name: str  # the suite's CLI / file name, e.g. "bfcl_v4", "rg_hard"
  framing: str  # "chat" | "tool"
  system: str | None  # the agent's system prompt (None: none)
  max_turns: int  # assistant turns per episode (the rollout's cap)
  max_new_tokens: int  # sampled tokens per assistant turn
  metric: str  # what the category numbers are, e.g. "accuracy", "win_rate"
  sampling: Sampling  # the suite's default sampling (as the paper's evaluation samples it)

  def prompts(self) -> list[Prompt]:
    """Every item, in a fixed order (``--limit N`` keeps the first N of each category)."""
    ...

  def make_env(self, prompt: Prompt) -> Env:
    """A fresh environment for one episode of ``prompt`` (never shared between episodes)."""
    ...

  def first_message(self, prompt: Prompt, obs: str) -> str:
    """The first user message of an episode, from the reset observation."""
    ...

  def oracle(self, prompt: Prompt) -> Policy | None:
    """A ground-truth policy for one episode of ``prompt`` (fresh per episode), or None where
    the suite has none."""
    ...


def empty_policy(obs: str, info: dict) -> str:
  """The policy that answers nothing (the harness's floor: every suite must score it ~0)."""
  return ""


def score_of(reward: float, terminated: bool) -> float:
  """An episode's score: the terminal reward clipped to [0, 1]; 0 if it never terminated."""
  return min(max(float(reward), 0.0), 1.0) if terminated else 0.0


def limit_prompts(prompts: list[Prompt], limit: int | None) -> list[Prompt]:
  """The first ``limit`` prompts of each category, in the suite's order (None: all)."""
  if limit is None:
    return list(prompts)
  seen: dict[str, int] = {}
  out = []
  for p in prompts:
    n = seen.get(p.category, 0)
    if n < limit:
      out.append(p)
      seen[p.category] = n + 1
  return out
