"""The Reasoning-Gym hard split suite: the table, the prompt, extraction and task scorers, the
oracle and empty-policy floors."""

from collections import Counter, defaultdict

import pytest
import reasoning_gym
from reasoning_gym.utils import SYSTEM_PROMPTS

from spade_jax.eval import rg_hard
from spade_jax.eval.rg_hard_configs import BUCKET_CATEGORIES, HARD_PARAMS
from spade_jax.eval.suite import empty_policy, limit_prompts, score_of

# a spread of tasks with a single right answer, at least one per bucket
SPREAD = {
  "basic_arithmetic": "math",
  "gcd": "math",
  "base_conversion": "algorithmic",
  "letter_counting": "algorithmic",
  "number_sequence": "cognition",
  "mini_sudoku": "cognition",
  "syllogism": "logic",
  "knights_knaves": "logic",
}


def play(suite, prompt, policy):
  env = suite.make_env(prompt)
  obs, info = env.reset(prompt.seed)
  _, reward, terminated, _, info = env.step(policy(obs, info))
  return score_of(reward, terminated), info["eval"]


@pytest.fixture(scope="module")
def spread():
  return rg_hard.RgHardSuite(tasks=tuple(SPREAD), items_per_task=3)


@pytest.fixture(scope="module")
def two_each():
  return rg_hard.RgHardSuite(items_per_task=2)


def test_table_has_the_100_tasks_each_in_one_bucket():
  tasks = [t for per_category in HARD_PARAMS.values() for t in per_category]
  assert len(tasks) == len(set(tasks)) == 100
  categories = [c for cs in BUCKET_CATEGORIES.values() for c in cs]
  assert sorted(categories) == sorted(HARD_PARAMS)  # every RG category in exactly one bucket
  assert set(rg_hard.TASK_BUCKET) == set(tasks) == set(rg_hard.TASK_PARAMS)
  assert Counter(rg_hard.TASK_BUCKET.values()) == {
    "math": 31,
    "algorithmic": 36,
    "cognition": 24,
    "logic": 9,
  }
  assert {t: rg_hard.TASK_BUCKET[t] for t in SPREAD} == SPREAD
  # spot values of the paper's hard column
  assert rg_hard.TASK_PARAMS["rubiks_cube"] == {
    "cube_size": 5,
    "min_scramble_steps": 25,
    "max_scramble_steps": 50,
  }
  assert rg_hard.TASK_PARAMS["ab"] == {"length": 25} and rg_hard.TASK_PARAMS["acre"] == {}


def test_default_suite_is_every_task_that_builds(two_each):
  missing = rg_hard.unavailable()
  assert set(two_each.tasks).isdisjoint(missing)
  assert set(two_each.tasks) | set(missing) == set(rg_hard.TASKS)
  assert all(isinstance(why, str) and why for why in missing.values())
  assert set(two_each.categories) == {p.category for p in two_each.prompts()}  # none empty
  with pytest.raises(ValueError, match="unknown"):
    rg_hard.RgHardSuite(tasks=("basic_arithmetic", "no_such_task"))


def test_prompts_are_the_hard_datasets_entries(spread):
  prompts = spread.prompts()
  assert len(prompts) == 3 * len(SPREAD)
  assert prompts[0].id == "rg:basic_arithmetic-hard/0" and prompts[0].category == "math"
  for task in ("gcd", "mini_sudoku"):
    fresh = reasoning_gym.create_dataset(task, size=3, seed=42, **rg_hard.TASK_PARAMS[task])
    mine = [p for p in prompts if spread.task_of(p) == task]
    assert [p.id for p in mine] == [f"rg:{task}-hard/{i}" for i in range(3)]
    assert [spread.entry(p)["question"] for p in mine] == [fresh[i]["question"] for i in range(3)]
  # a per-bucket limit takes item 0 of different tasks first
  first = limit_prompts(prompts, 2)
  assert [spread.task_of(p) for p in first if p.category == "logic"] == [
    "syllogism",
    "knights_knaves",
  ]


def test_prompt_is_the_reference_answer_tag_prompt(spread):
  prompt = spread.prompts()[0]
  obs, _ = spread.make_env(prompt).reset(prompt.seed)
  assert obs == spread.entry(prompt)["question"] + "\n\nPut your final answer within \\boxed{}."
  msg = spread.first_message(prompt, "Q?")
  assert msg.startswith("Given a problem, your task is to answer the question by thinking")
  assert "\nProblem: Q?\nOnce you have thought about the reasoning process" in msg
  assert "<answer>answer here</answer>" in msg
  # Reasoning-Gym's own default prompt with the problem inserted after its first line
  assert msg.replace("Problem: Q?\n", "") == SYSTEM_PROMPTS["default"].rstrip("\n")
  assert spread.system is None and spread.framing == "chat" and spread.max_new_tokens == 8192
  assert spread.sampling.temperature == 0.6 and spread.name == "rg_hard"


def test_extraction():
  assert rg_hard.extract_answer("x <answer>1</answer> y <ANSWER>\n 2 \n</answer>") == "2"
  assert rg_hard.extract_answer("so \\boxed{7} and \\boxed{8}") == "8"
  assert rg_hard.extract_answer("<answer>3</answer> but \\boxed{4}") == "3"
  assert rg_hard.extract_answer("<answer>unclosed \\boxed{5}") == "5"
  assert rg_hard.extract_answer("no answer here") is None


def test_scores_match_the_tasks_own_scorer(spread):
  for prompt in spread.prompts():
    task, entry = spread.task_of(prompt), spread.entry(prompt)
    ds = reasoning_gym.create_dataset(task, size=3, seed=42, **rg_hard.TASK_PARAMS[task])
    right, wrong = str(entry["answer"]), "definitely not it"
    assert ds.score_answer(right, entry) == 1.0 and ds.score_answer(wrong, entry) < 1.0
    cases = {
      f"Thinking...\n<answer>{right}</answer>": right,
      f"Thinking...\n\\boxed{{{right}}}": right,
      f"<answer>{right}</answer> then <answer>{wrong}</answer>": wrong,
      f"<answer>{wrong}</answer> and \\boxed{{{right}}}": wrong,
    }
    for text, answer in cases.items():
      score, info = play(spread, prompt, lambda obs, info, text=text: text)
      assert info["answer"] == answer
      assert info["score"] == ds.score_answer(answer, entry), (prompt.id, text)
      assert score == float(info["solved"]) == float(info["score"] >= 1.0)  # the paper's win
    for garbage in ("", "I am not sure.", "<answer>", "\\boxed{"):
      score, info = play(spread, prompt, lambda obs, info, g=garbage: g)
      assert score == 0.0 and info["answer"] is None


def test_scorer_error_scores_zero():
  class Raises:
    def score_answer(self, answer, entry):
      raise KeyError("boom")

  env = rg_hard.RgHardEnv(Raises(), {"question": "q", "answer": "a", "metadata": {}})
  env.reset()
  _, reward, terminated, _, info = env.step("<answer>a</answer>")
  assert reward == 0.0 and terminated and info["eval"]["score"] == 0.0


def test_rubiks_solution_undoes_every_scramble_move_kind():
  ds = reasoning_gym.create_dataset(
    "rubiks_cube", size=1, seed=42, **rg_hard.TASK_PARAMS["rubiks_cube"]
  )
  entry = ds[0]
  entry["metadata"]["scramble_moves"] = "1Lw R' Uw 2D' 2F 1Bw' Rw' L"
  solution = rg_hard.rubiks_cube_solution(entry["metadata"]["scramble_moves"])
  assert solution == "L' Rw B Fw' F Dw D' Uw' R L'"
  assert ds.score_answer(solution, entry) == 1.0
  assert ds.score_answer("L' Rw B", entry) < 1.0


def test_oracle_and_empty_policy_per_bucket(two_each):
  oracle, empty = defaultdict(list), defaultdict(list)
  for prompt in two_each.prompts():
    oracle[prompt.category].append(play(two_each, prompt, two_each.oracle(prompt))[0])
    empty[prompt.category].append(play(two_each, prompt, empty_policy)[0])
  assert set(oracle) == set(rg_hard.BUCKETS)
  for bucket, scores in oracle.items():
    assert sum(scores) / len(scores) >= 0.95, bucket
    assert sum(empty[bucket]) == 0.0, bucket
