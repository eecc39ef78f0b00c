"""The one-visitor lowering on constructs the idiom translator refused: each environment below
is translated and accepted only after the differential check against its sandboxed original
(same draws, scripted answers), so "translated" means "plays exactly like Python"."""

from __future__ import annotations

import pytest
from envs_fixtures import tokenizer

from spade_jax.envs.sandbox.pool import SandboxPool
from spade_jax.envs.translate.pipeline import translate, translate_and_check

HEAD = """import itertools
import random
import re


"""

TEMPLATES = (
  HEAD
  + """class OpsEnv:
  def __init__(self, **kwargs):
    self.reset()

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.op = rng.randint(0, 2)
    a, b = rng.randint(2, 30), rng.randint(2, 30)
    if self.op == 0:
      self.answer = a + b
      text = f"Add {a} and {b}."
    elif self.op == 1:
      self.answer = a - b
      text = f"Subtract {b} from {a}."
    else:
      self.answer = a * b
      text = f"Multiply {a} by {b}."
    self.turn = 0
    return text + " Answer in \\\\boxed{}.", {}

  def solution(self):
    return str(self.answer)

  def step(self, action):
    self.turn += 1
    m = re.search(r"\\\\boxed\\{(-?\\d+)\\}", action)
    if m is None:
      reply = "No answer."
    elif int(m.group(1)) == self.answer:
      return "Right.", 1.0, True, False, {}
    elif int(m.group(1)) < self.answer:
      reply = "Too small."
    else:
      reply = "Too big."
    return reply, 0.0, False, self.turn >= 3, {}
"""
)

LOOPS = (
  HEAD
  + """def first_factor(n):
  d = 2
  while d * d <= n:
    if n % d == 0:
      return d
    d += 1
  return None


class LoopsEnv:
  def __init__(self, **kwargs):
    self.reset()

  def reset(self, seed=None):
    random.seed(seed)
    self.nums = random.sample(range(1, 500), 5)
    self.gap = min(abs(a - b) for a, b in itertools.combinations(self.nums, 2))
    f = first_factor(self.nums[0])
    self.answer = self.gap + (0 if f is None else f)
    total = 0
    for i in range(300):
      if i % 7 == 3:
        continue
      if total > 20000:
        break
      total += i
    self.answer += total % 10
    return f"Numbers: {', '.join(str(x) for x in self.nums)}. Find the secret. \\\\boxed{{}}", {}

  def solution(self):
    return str(self.answer)

  def step(self, action):
    found = re.findall(r"\\\\boxed\\{\\s*(\\d+)\\s*\\}", action)
    if found and int(found[-1]) == self.answer:
      return "Yes.", 1.0, True, False, {}
    return "No.", 0.0, True, False, {}
"""
)


@pytest.fixture(scope="module")
def pool():
  p = SandboxPool(2)
  yield p
  p.close()


@pytest.mark.parametrize("source", [TEMPLATES, LOOPS], ids=["templates", "loops"])
def test_translates_and_matches_python(pool, source):
  out = translate_and_check(source, None, tokenizer=tokenizer("tiny"), seeds=16, pool=pool)
  assert out["translated"], out["translation_reason"]


def test_observation_chosen_among_templates_at_run_time():
  tr = translate(TEMPLATES, tokenizer("tiny"))
  assert tr.program is not None, tr.reason
  text = tr.assembly
  assert "obssel r" in text and text.count("\nobs ") == 3
  # feedback texts with their outcomes: only the pairs a return gives
  cases = [line for line in text.splitlines() if line.startswith("case ")]
  assert any(" stop " in c and "Right." in c for c in cases)
  assert not any(" stop " in c and "Too big." in c for c in cases)


def test_loops_are_ir_loops_not_unrolled():
  tr = translate(LOOPS, tokenizer("tiny"))
  assert tr.program is not None, tr.reason
  assert "jmp @" in tr.assembly and "rsample" in tr.assembly
  assert len(tr.assembly.splitlines()) < 200  # range(300) is a loop, not 300 copies
