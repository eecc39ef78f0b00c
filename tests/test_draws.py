"""Draw replay/recording: the tape format round-trips and mismatches are loud."""

from __future__ import annotations

import random
import types

import pytest

from spade_jax.envs.ir.draws import DrawMismatch, DrawRecorder, DrawReplay, substitute_random


def _episode(rng):
  """Uses every supported call, the way an environment would."""
  a = rng.randint(-5, 5)
  b = rng.choice([10, 20, 30, 40])
  c = rng.sample(list(range(100, 110)), 4)
  d = list("abcdef")
  rng.shuffle(d)
  return a, b, c, d


def test_recorded_tape_replays_the_same_episode():
  for seed in range(50):
    rec = DrawRecorder(seed)
    first = _episode(rec)
    assert len(rec.tape) == 1 + 1 + 4 + 6
    replay = DrawReplay(rec.tape)
    assert _episode(replay) == first
    assert replay.done()


def test_recorder_is_a_uniform_rng():
  rec = DrawRecorder(0)
  seen = {rec.randint(1, 6) for _ in range(200)}
  assert seen == set(range(1, 7))
  assert isinstance(rec, random.Random)


def test_replay_rejects_draws_that_do_not_fit():
  with pytest.raises(DrawMismatch, match="out of range"):
    DrawReplay([7]).randint(1, 6)
  with pytest.raises(DrawMismatch, match="no recorded draw left"):
    DrawReplay([]).randint(1, 6)
  with pytest.raises(DrawMismatch, match="not distinct"):
    DrawReplay([0, 0]).shuffle([1, 2])
  with pytest.raises(DrawMismatch, match="out of range 2"):
    DrawReplay([2]).choice("ab")


def test_substitute_random_patches_module_level_and_instance_use():
  import random as real

  mod = types.ModuleType("fake_env")
  mod.random = real
  replay = DrawReplay([3, 4])
  with substitute_random(mod, replay):
    assert mod.random.Random(123).randint(0, 9) == 3
    assert mod.random.randint(0, 9) == 4
  assert mod.random is real
