"""Environment memory: FIFO eviction, truncation, seed/negative selection, seeded sampling and
JSON resume."""

import json

import pytest

from spade_jax.spade.memory import EnvMemory, MemoryConfig

MATH, LOGIC = "Mathematical Reasoning", "Logical Deduction"


def test_fifo_and_truncation():
  mem = EnvMemory(MemoryConfig(max_records=3))
  for i in range(5):
    mem.add(f"src{i}", MATH, 0.5, 0.1 * i, step=i)
  assert [r.step for r in mem.records] == [2, 3, 4]
  mem = EnvMemory()
  rec = mem.add("x" * 5000, MATH, 0.5, 0.2, 0)
  assert len(rec.source) == 2000 and mem.config.max_records == 200
  for i in range(250):
    mem.add("s", MATH, 0.5, 0.0, i)
  assert len(mem) == 200 and mem.records[0].step == 50
  with pytest.raises(ValueError, match="finite"):
    mem.add("s", MATH, float("nan"), 0.0, 0)


def test_positive_candidates_band_skill_and_ranking():
  mem = EnvMemory()
  mem.add("edge_lo", MATH, 0.15, 0.30, 0)  # band is inclusive
  mem.add("edge_hi", MATH, 0.85, 0.20, 1)
  mem.add("too_hard", MATH, 0.10, 0.90, 2)  # outside the band despite high regret
  mem.add("too_easy", MATH, 0.90, 0.90, 3)
  mem.add("other_skill", LOGIC, 0.50, 0.99, 4)
  mem.add("mid", MATH, 0.50, 0.25, 5)
  assert [r.source for r in mem.positive_candidates(MATH)] == ["edge_lo", "mid", "edge_hi"]


def test_top10_cut_and_seeded_sampling():
  mem = EnvMemory()
  for i in range(12):
    mem.add(f"r{i}", MATH, 0.5, float(i), i)
  top = mem.positive_candidates(MATH)
  assert [r.regret for r in top] == [11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0]
  seen = set()
  for seed in range(200):
    pos, neg = mem.select(MATH, seed=(7, seed))
    assert len(pos) == 2 and pos[0] is not pos[1] and neg is None
    assert pos[0].regret > pos[1].regret  # returned in regret order
    assert all(p.regret >= 2.0 for p in pos)  # only the top 10
    seen.update(p.source for p in pos)
    assert mem.select(MATH, seed=(7, seed)) == (pos, neg)  # deterministic
  assert seen == {f"r{i}" for i in range(2, 12)}  # every top-10 record gets drawn


def test_negatives_same_skill_first_then_any():
  mem = EnvMemory()
  mem.add("boundary_easy", MATH, 0.9, 0.0, 0)  # strict thresholds: not negatives
  mem.add("boundary_hard", MATH, 0.1, 0.0, 1)
  assert mem.select(MATH, 0) == ((), None)
  mem.add("logic_trivial", LOGIC, 0.95, 0.0, 2)
  _, neg = mem.select(MATH, 0)
  assert neg.source == "logic_trivial" and neg.too_easy_or_hard == "too easy"
  mem.add("math_hopeless", MATH, 0.05, 0.0, 3)
  for seed in range(20):
    _, neg = mem.select(MATH, seed)
    assert neg.source == "math_hopeless" and neg.too_easy_or_hard == "too hard"


def test_fewer_candidates_than_seeds():
  mem = EnvMemory()
  mem.add("only", MATH, 0.4, 0.2, 0)
  pos, _ = mem.select(MATH, 3)
  assert [p.source for p in pos] == ["only"]
  assert mem.select(LOGIC, 3) == ((), None)


def test_json_resume_round_trip():
  mem = EnvMemory(MemoryConfig(max_records=5))
  for i in range(8):
    mem.add(f"s{i}", [MATH, LOGIC][i % 2], 0.2 + 0.05 * i, 0.1 * i, i)
  state = json.loads(json.dumps(mem.to_state()))
  back = EnvMemory.from_state(state, MemoryConfig(max_records=5))
  assert back.records == mem.records
  for seed in range(10):
    assert back.select(MATH, seed) == mem.select(MATH, seed)
  back.add("new", MATH, 0.5, 0.0, 9)  # FIFO bound survives the round trip
  assert len(back) == 5 and back.records[0].step == 4
  with pytest.raises(ValueError, match="max_records"):
    EnvMemory.from_state(state, MemoryConfig(max_records=6))


def test_library_seeds_bootstrap_the_prompt_and_stay_apart():
  from spade_jax.spade import prompts
  from spade_jax.spade.library_seeds import library_entries, seed_memory
  from spade_jax.spade.skills import get_skill

  mem = EnvMemory()
  entries = library_entries("game")
  assert seed_memory(mem, "game") == len(entries) > 2
  assert len(mem) == 0 and mem.records == ()  # seeds are not model-written records
  assert all(r.is_seed and r.origin == "library" for r in mem.seeds)
  assert [r.source for r in mem.seeds] == [e.source for e in entries]  # whole, not truncated
  pos, neg = mem.select(MATH, seed=(0, 0, 0, 0))
  assert len(pos) == 2 and neg is None and all(p.is_seed and p.skill == MATH for p in pos)
  pos, _ = mem.select(LOGIC, seed=1)  # one Logical Deduction seed; the other from any skill
  assert len(pos) == 2 and pos[0].skill == LOGIC and pos[1].skill != LOGIC
  msgs = prompts.designer_messages(get_skill(MATH), seeds=pos)
  user = msgs[1]["content"]
  assert "## Example games" in user and user.count("a working library environment") == 2
  assert all(p.source.rstrip() in user for p in pos)
  # model-written records in the learning band come first; seeds fill the rest
  mem.add("model_env", MATH, 0.5, 0.3, 4)
  mem.add("easy_env", MATH, 0.95, 0.0, 5)
  pos, neg = mem.select(MATH, seed=2)
  assert [p.origin for p in pos] == ["model", "library"] and neg.source == "easy_env"
  assert (
    "agent win rate 0.50" in prompts.designer_messages(get_skill(MATH), seeds=pos)[1]["content"]
  )
  for _ in range(3):
    mem.add("more", MATH, 0.5, 0.1, 6)
  assert all(not p.is_seed for p in mem.select(MATH, seed=3)[0])
  state = json.loads(json.dumps(mem.to_state()))
  back = EnvMemory.from_state(state)
  assert back.seeds == mem.seeds and back.records == mem.records


def test_is_seed_copy_normalises_whitespace():
  mem = EnvMemory()
  mem.add_seed("class AEnv:\n  def reset(self):\n    return 1\n", MATH, name="a")
  assert mem.is_seed_copy("class  AEnv:\n\n  def reset(self):   \n    return 1").name == "a"
  assert mem.is_seed_copy("class AEnv:\n  def reset(self):\n    return 2\n") is None
  assert mem.is_seed_copy("   ") is None
  mem.add("class AEnv:\n  def reset(self):\n    return 1\n", MATH, 0.5, 0.0, 0)
  assert mem.is_seed_copy("class BEnv: pass") is None  # model records are not seeds
