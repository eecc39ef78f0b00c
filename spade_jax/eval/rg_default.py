"""``rg``: the in-loop Reasoning-Gym check at default difficulty (`spade.heldout`) as a suite.

Thirteen tasks at reasoning_gym's default parameters, ``\\boxed{}`` answers, scored by each
task's own ``score_answer``, greedy: the cheap held-out signal a training run logs every
``eval.every`` steps (``eval/accuracy``, ``eval/<bucket>``). The paper's numbers come from the
hard split (`eval.rg_hard`), not from this.
"""

from __future__ import annotations

from spade_jax.eval.suite import Policy, Prompt, Sampling
from spade_jax.spade.heldout import DEFAULT_TASKS, HeldoutConfig, HeldoutSet


class _Answer:
  """Single-turn environment: the reply is scored by the item's task scorer."""

  def __init__(self, heldout: HeldoutSet, item):
    self.heldout, self.item = heldout, item

  def reset(self, seed=None):
    return self.heldout.messages(self.item)[0]["content"], {}

  def step(self, action):
    score = self.heldout.score(self.item, action)
    return "", score, True, False, {"eval": {"score": score}}


class RgDefaultSuite:
  name = "rg"
  framing = "chat"
  system = None
  metric = "accuracy"
  sampling = Sampling(greedy=True)
  max_turns = 1

  def __init__(
    self,
    tasks: tuple[str, ...] = DEFAULT_TASKS,
    items_per_task: int = 8,
    seed: int = 1234,
    max_new_tokens: int = 512,
  ):
    self.heldout = HeldoutSet(HeldoutConfig(tuple(tasks), items_per_task, seed))
    self.max_new_tokens = max_new_tokens

  def prompts(self) -> list[Prompt]:
    return [Prompt(f"{it.task}/{it.index}", it.bucket, 0, it) for it in self.heldout.items]

  def make_env(self, prompt: Prompt):
    return _Answer(self.heldout, prompt.data)

  def first_message(self, prompt: Prompt, obs: str) -> str:
    return obs

  def oracle(self, prompt: Prompt) -> Policy:
    answer = prompt.data.answer
    return lambda obs, info: f"\\boxed{{{answer}}}"
