"""Held-out Reasoning-Gym items: seeded items, boxed extraction, the tasks' own scorers."""

import pytest

from spade_jax.spade.heldout import INSTRUCTION, HeldoutConfig, HeldoutSet, last_boxed


def test_last_boxed():
  assert last_boxed("a \\boxed{1} b \\boxed{-17}") == "-17"
  assert last_boxed("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
  assert last_boxed("\\boxed{2, 4, 6} then \\boxed{unclosed") == "2, 4, 6"
  assert last_boxed("no answer") is None


def test_items_are_seeded_and_scored_by_task():
  cfg = HeldoutConfig(tasks=("basic_arithmetic", "gcd", "syllogism"), items_per_task=4, seed=7)
  a, b = HeldoutSet(cfg), HeldoutSet(cfg)
  assert [i.question for i in a.items] == [i.question for i in b.items]
  assert len(a) == 12 and {i.bucket for i in a.items} == {"math", "logic"}
  other = HeldoutSet(HeldoutConfig(tasks=cfg.tasks, items_per_task=4, seed=8))
  assert [i.question for i in other.items] != [i.question for i in a.items]

  for item in a.items:
    (message,) = a.messages(item)
    assert message["role"] == "user" and message["content"].endswith("\n\n" + INSTRUCTION)
    assert a.score(item, f"So the answer is \\boxed{{{item.answer}}}.") == 1.0
    assert a.score(item, "I don't know") == 0.0  # no boxed answer
    assert a.score(item, "\\boxed{nonsense}") == 0.0


def test_bad_config():
  with pytest.raises(ValueError, match="unknown held-out task"):
    HeldoutSet(HeldoutConfig(tasks=("no_such_task",)))
  with pytest.raises(ValueError, match="items_per_task"):
    HeldoutSet(HeldoutConfig(tasks=("gcd",), items_per_task=0))
