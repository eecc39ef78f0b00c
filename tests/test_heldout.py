"""Held-out Reasoning-Gym evaluation: seeded items, boxed extraction, task scorers, summaries."""

import json

import pytest

from spade_jax.spade.heldout import INSTRUCTION, HeldoutConfig, HeldoutSet, last_boxed


def test_last_boxed():
  assert last_boxed("a \\boxed{1} b \\boxed{-17}") == "-17"
  assert last_boxed("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
  assert last_boxed("\\boxed{2, 4, 6} then \\boxed{unclosed") == "2, 4, 6"
  assert last_boxed("no answer") is None


def test_items_are_seeded_and_scored_by_task(tmp_path):
  cfg = HeldoutConfig(tasks=("basic_arithmetic", "gcd", "syllogism"), items_per_task=4, seed=7)
  a, b = HeldoutSet(cfg), HeldoutSet(cfg)
  assert [i.question for i in a.items] == [i.question for i in b.items]
  assert len(a) == 12 and {i.bucket for i in a.items} == {"math", "logic"}
  other = HeldoutSet(HeldoutConfig(tasks=cfg.tasks, items_per_task=4, seed=8))
  assert [i.question for i in other.items] != [i.question for i in a.items]

  def oracle(convs):
    by_q = {i.question: i.answer for i in a.items}
    questions = [c[0]["content"].removesuffix("\n\n" + INSTRUCTION) for c in convs]
    return [f"So the answer is \\boxed{{{by_q[q]}}}." for q in questions]

  metrics = a.evaluate(oracle, tmp_path / "eval.jsonl")
  assert metrics["eval/accuracy"] == 1.0 and metrics["eval/task/gcd"] == 1.0
  lines = [json.loads(x) for x in (tmp_path / "eval.jsonl").read_text().splitlines()]
  assert len(lines) == 12 and all(x["score"] == 1.0 for x in lines)

  wrong = a.evaluate(
    lambda convs: ["\\boxed{nonsense}" if k % 2 else "I don't know" for k in range(len(convs))]
  )
  assert wrong["eval/accuracy"] == 0.0 and wrong["eval/math"] == 0.0


def test_partial_summary_and_bad_config():
  s = HeldoutSet(HeldoutConfig(tasks=("chain_sum", "count_bits"), items_per_task=2))
  m = s.summarize([1.0, 0.0, 1.0, 1.0])
  assert m["eval/accuracy"] == 0.75 and m["eval/math"] == 0.5 and m["eval/algorithmic"] == 1.0
  with pytest.raises(ValueError, match="unknown held-out task"):
    HeldoutSet(HeldoutConfig(tasks=("no_such_task",)))
  with pytest.raises(ValueError, match="scores for"):
    s.summarize([1.0])
