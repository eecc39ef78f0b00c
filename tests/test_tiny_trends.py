"""spade_jax.tiny.analysis.trends: first- vs last-quarter trends and the acceptance check, on
synthetic runs (the recorded default run in docs/tiny/ is checked by running the command)."""

import json
from pathlib import Path

import pytest

from spade_jax.tiny.analysis import trends as tiny_trends

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path, acc, ref, valid0=0.75):
  rows = []
  for step in range(len(acc)):
    r = {"step": step, "eval/accuracy": acc[step], "designer/difficulty_ref": ref[step]}
    if step == 0:
      r["designer/valid_rate"] = valid0
    rows.append(r)
  path = tmp_path / "metrics.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  return tiny_trends.trends(path)


def test_quarters_are_means_of_the_first_and_last_quarter(tmp_path):
  t = _run(tmp_path, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [0.5] * 8)
  assert t["eval/accuracy"]["first_quarter"] == 0.15
  assert t["eval/accuracy"]["last_quarter"] == 0.75
  assert t["eval/accuracy"]["stderr"] == pytest.approx(0.0707, abs=1e-4)  # sqrt(2 * 0.005 / 2)
  assert t["designer/difficulty_ref"]["stderr"] == 0
  assert t["first_valid_rate"] == 0.75
  assert (t["eval/accuracy"]["min"], t["eval/accuracy"]["max"]) == (0.1, 0.8)
  assert t["eval/accuracy"]["evaluations"] == 8


@pytest.mark.parametrize(
  "acc, ref, valid0, failures",
  [
    ([0.1, 0.1, 0.2, 0.2], [0.5, 0.5, 0.6, 0.6], 0.5, []),
    ([0.2, 0.2, 0.1, 0.1], [0.5, 0.5, 0.6, 0.6], 0.5, ["held-out accuracy did not rise"]),
    ([0.1, 0.1, 0.2, 0.2], [0.6, 0.6, 0.6, 0.6], 0.5, ["frozen warm-started policy"]),
    ([0.1, 0.1, 0.2, 0.2], [0.5, 0.5, 0.6, 0.6], 0.0, ["no valid designer program"]),
    # a rise within the noise of the quarters is not a rise
    (
      [0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2],
      [0.4, 0.8, 0.4, 0.8, 0.4, 0.8, 0.5, 0.8],
      0.5,
      ["frozen warm-started policy"],
    ),
  ],
)
def test_check_requires_valid_programs_rising_heldout_and_harder_pools(
  tmp_path, acc, ref, valid0, failures
):
  got = tiny_trends.check(_run(tmp_path, acc, ref, valid0))
  assert len(got) == len(failures)
  for g, f in zip(got, failures):
    assert f in g


def _config_json(path, steps):
  import sys

  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  c = tiny.get_config("")
  c.steps = steps
  path.write_text(c.to_json_best_effort())
  return c


def test_pool_series_pair_by_skill_composition(tmp_path):
  """Pools whose skills fail ~0.9 or ~0.5 alternate with the schedule (period 5
  regenerations); a rise of 0.05 is hidden by that spread unpaired, found when each value is
  compared with the same composition's."""
  from spade_jax.tiny.setup import TinySetup

  c = _config_json(tmp_path / "config.json", 80)
  setup = TinySetup(c)
  hard = {"Logical Deduction", "Strategic Planning"}
  rows = []
  for step in range(0, 80, 2):
    base = 0.5 + 0.4 * sum(s in hard for s in setup.skills_of(step)) / c.spade.num_games
    rows.append({"step": step, "designer/difficulty_ref": base + 0.05 * (step >= 60)})
  rows[0]["designer/valid_rate"] = 1.0
  for r in rows[::5]:
    r["eval/accuracy"] = 0.1 + r["step"] / 400
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  t = tiny_trends.trends(tmp_path / "metrics.jsonl")
  ref = t["designer/difficulty_ref"]
  assert ref["pairs"] == 10
  assert ref["paired_diff"] == pytest.approx(0.05, abs=1e-4)
  assert ref["paired_stderr"] < 1e-4 < ref["stderr"]
  assert ref["last_quarter"] - ref["first_quarter"] < ref["stderr"]  # unpaired: no rise
  assert "paired_diff" not in t["eval/accuracy"]  # held-out plays do not depend on the pool
  assert len(ref["by_skills"]) == 5 and max(ref["by_skills"].values()) > 0.6
  assert tiny_trends.check(t) == []


def test_timing_splits_regeneration_and_replay_steps(tmp_path):
  rows = []
  for step in range(6):  # regenerations at even steps (they log the designer's metrics)
    r = {"step": step, "perf/step_s": [30.0, 9.0, 3.0, 2.0, 5.0, 1.0][step]}
    if step % 2 == 0:
      r["designer/valid_rate"] = 1.0
    rows.append(r)
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  (tmp_path / "warm_start.json").write_text(json.dumps({"warm/steps": 4, "perf/warm_start_s": 7}))
  assert tiny_trends.timing(tmp_path / "metrics.jsonl") == {
    "steps_s": 50.0,
    "first_regeneration_step_s": 30.0,
    "median_regeneration_step_s": 4.0,
    "first_replay_step_s": 9.0,
    "median_replay_step_s": 1.5,
    "warm_start_s": 7,
  }


def test_same_metrics_ignores_timings_only(tmp_path):
  a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
  a.write_text('{"step": 0, "x": 1, "perf/step_s": 2}\n{"step": 1, "x": 2}\n')
  b.write_text('{"step": 0, "x": 1, "perf/step_s": 9}\n{"step": 1, "x": 3}\n{"step": 2, "x": 1}\n')
  assert tiny_trends.same_metrics(a, b) == (1, 3)
  b.write_text('{"step": 0, "x": 1, "new": 5}\n{"step": 1, "x": 2, "new": 6}\n')
  assert tiny_trends.same_metrics(a, b) == (0, 2)
  assert tiny_trends.same_metrics(a, b, ignore=("new",)) == (2, 2)
  b.write_text('{"step": 0, "x": 1, "eval/a": 5}\n{"step": 1, "x": 2, "eval/b": 6}\n')
  assert tiny_trends.same_metrics(a, b, ignore=("eval/",)) == (2, 2)


def _eval_files(run_dir, solved_per_eval, groups=None):
  """One file per evaluation; episode i has seed i (and ``groups[i]``) in every file."""
  (run_dir / "eval").mkdir()
  for k, solved in enumerate(solved_per_eval):
    eps = [
      {"family": "argmax", "group": g, "seed": i, "solved": bool(x)}
      for i, (x, g) in enumerate(zip(solved, groups or ["unseen_levels"] * len(solved)))
    ]
    path = run_dir / "eval" / f"step{10 * k:06d}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in eps))


@pytest.mark.parametrize("up, down, passes", [(10, 8, False), (30, 0, True), (40, 10, True)])
def test_heldout_pairs_by_episode(tmp_path, up, down, passes):
  """Two equal evaluations per quarter give the unpaired rule a standard error of 0, so a net
  change of two episodes out of 248 (10 newly solved, 8 newly failed) passed it; paired by
  episode it is within one standard error."""
  n = 248
  first = [1] * 40 + [0] * (n - 40)
  last = [0] * down + [1] * (40 - down) + [1] * up + [0] * (n - 40 - up)
  _eval_files(tmp_path, [first, first, first, last, last])
  acc = [sum(s) / n for s in (first, first, first, last, last)]
  t = _run(tmp_path, acc, [0.5, 0.5, 0.5, 0.6, 0.6], 0.5)
  h = t["eval/accuracy"]
  assert h["stderr"] == 0 and h["last_quarter"] > h["first_quarter"]
  assert h["pairs"] == n
  assert h["paired_diff"] == pytest.approx((up - down) / n, abs=1e-4)
  mean, sq = (up - down) / n, (up + down) / n
  assert h["paired_stderr"] == pytest.approx(((sq - mean**2) / (n - 1)) ** 0.5, abs=1e-4)
  assert ("held-out accuracy did not rise" not in tiny_trends.check(t)) == passes


def test_heldout_groups_are_paired_over_their_own_episodes(tmp_path):
  groups = ["unseen_levels"] * 4 + ["unseen_families"] * 4
  _eval_files(tmp_path, [[0, 0, 0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 1, 0, 1, 1]], groups)
  # changes per episode: +1 +1 0 0 | 0 -1 0 0
  assert tiny_trends.heldout_paired(tmp_path) == pytest.approx((0.125, 0.2266, 8), abs=1e-4)
  levels = tiny_trends.heldout_paired(tmp_path, "unseen_levels")
  assert levels == pytest.approx((0.5, 0.2887, 4), abs=1e-4)
  families = tiny_trends.heldout_paired(tmp_path, "unseen_families")
  assert families == pytest.approx((-0.25, 0.25, 4))
  assert tiny_trends.heldout_paired(tmp_path, "no_such_group") is None


def test_heldout_pairing_refuses_evaluations_of_different_episodes(tmp_path):
  _eval_files(tmp_path, [[1, 0, 0], [1, 1, 0]])
  (tmp_path / "eval" / "step000020.jsonl").write_text(
    json.dumps({"family": "x", "group": "g", "seed": 7, "solved": True}) + "\n"
  )
  with pytest.raises(ValueError, match="same episodes"):
    tiny_trends.heldout_paired(tmp_path)
