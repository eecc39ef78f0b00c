"""spade_jax.tiny.analysis.pool_families: family assignment by task-statement words and the
first- vs last-quarter tables (the command itself runs on a smoke run in test_tiny_train.py)."""

import numpy as np
import pytest

from spade_jax.tiny.analysis import pool_families as pf

ARGMAX = (
  'reset\nobs "Here is a list: " l0 ". At which position is its largest value?"\nhint "Scan."'
)
GUESS = 'reset\nobs "I am thinking of an integer between 1 and " r1 ". Guess it."'


def test_obs_words_reads_only_the_statement():
  assert pf.obs_words(ARGMAX) == {"here", "list", "which", "position", "its", "largest", "value"}
  assert pf.obs_words('hint "largest"\nstep') == set()


def test_family_of_picks_the_most_overlapping_statement():
  families = {"argmax": pf.obs_words(ARGMAX), "guess_number": pf.obs_words(GUESS)}
  assert pf.family_of(ARGMAX, families) == ("argmax", 1.0)
  mixed = 'obs "Here is a list. Guess its largest value"'
  fam, score = pf.family_of(mixed, families)
  assert fam == "argmax" and 0 < score < 1
  assert pf.family_of('obs "zzz"', families) == (None, 0.0)


def test_quarters_and_within_family_change_leave_out_the_mix():
  # first quarter: a hard family (1.0) and an easy one (0.2); last: mostly the easy one, each
  # family 0.1 harder than before -> overall easier, within families harder
  steps = [0, 0, 0, 0, 6, 6, 6, 6, 2, 4]
  fams = np.asarray(["hard", "hard", "easy", "easy", "hard", "easy", "easy", "easy", "x", "x"])
  fail = np.asarray([0.9, 0.9, 0.2, 0.2, 1.0, 0.3, 0.3, 0.3, 0.5, 0.5])
  t = pf.quarter_table(steps, fams, fail)
  assert t["first"]["*"] == (4, pytest.approx(0.55)) and t["last"]["*"] == (4, pytest.approx(0.475))
  assert t["first"]["hard"] == (2, pytest.approx(0.9)) and t["last"]["easy"][0] == 3
  assert pf.within_family_change(t) == pytest.approx(0.1)
  assert pf.within_family_change({"first": {"a": (1, 0.5)}, "last": {"b": (1, 0.5)}}) is None
