"""Skill taxonomy, rotating active window and round-robin assignment."""

import collections

import pytest

from spade_jax.spade import skills as S

NINE = (
  "Mathematical Reasoning",
  "Logical Deduction",
  "Spatial Reasoning",
  "Pattern Recognition",
  "Optimization",
  "Causal Inference",
  "Strategic Planning",
  "Memory Recall",
  "Language Understanding",
)


def test_taxonomy():
  assert S.SKILL_NAMES == NINE and S.NUM_SKILLS == 9
  assert S.GAMES_SKILLS == NINE[:6]
  for i, skill in enumerate(S.TAXONOMY):
    assert S.skill_index(skill.name) == i and S.get_skill(skill.name) is skill
    assert len(skill.description) > 60 and len(skill.examples) >= 3
    assert len(set(skill.examples)) == len(skill.examples)
  with pytest.raises(ValueError, match="unknown skill 'Juggling'"):
    S.skill_index("Juggling")


def test_default_window_rotates_through_the_six_games_skills():
  assert S.active_skills(0) == NINE[0:3]
  assert S.active_skills(1) == NINE[3:6]
  assert S.active_skills(2) == NINE[0:3]
  full = S.SkillSchedule(skills=NINE)
  assert [S.active_skills(e, full) for e in range(3)] == [NINE[0:3], NINE[3:6], NINE[6:9]]


def test_window_that_does_not_divide_covers_skills_evenly():
  sched = S.SkillSchedule(skills=NINE[:4], active=3)
  windows = [S.active_skills(e, sched) for e in range(4)]
  assert windows[0] == (NINE[0], NINE[1], NINE[2])
  assert windows[1] == (NINE[3], NINE[0], NINE[1])
  assert windows[2] == (NINE[2], NINE[3], NINE[0])
  counts = collections.Counter(s for w in windows for s in w)
  assert set(counts.values()) == {3}


def test_round_robin_assignment():
  games = S.assign_skills(1, 24)
  assert games[:4] == (NINE[3], NINE[4], NINE[5], NINE[3])
  assert collections.Counter(games) == {NINE[3]: 8, NINE[4]: 8, NINE[5]: 8}
  assert S.assign_skills(1, 24) == games  # deterministic
  assert S.skill_ids(games[:3]) == [3, 4, 5]
  assert S.assign_skills(0, 5, S.SkillSchedule(active=1)) == (NINE[0],) * 5


def test_schedule_validation():
  with pytest.raises(ValueError, match="active=4"):
    S.SkillSchedule(skills=NINE[:3], active=4)
  with pytest.raises(ValueError, match="duplicates"):
    S.SkillSchedule(skills=(NINE[0], NINE[0]), active=1)
  with pytest.raises(ValueError, match="unknown skill"):
    S.SkillSchedule(skills=("Chess",), active=1)
  with pytest.raises(ValueError, match="epoch"):
    S.active_skills(-1)
