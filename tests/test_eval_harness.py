"""The evaluation harness (`spade_jax.eval`): records on disk and avg@k with standard errors,
resumable `harness.evaluate` on a toy suite, the CLI with the scripted ceiling and floor policies,
`compare`, and the held-out split (held-out library environments never train, every training
skill keeps an environment, the held-out suites cover exactly the held-out ones)."""

import contextlib
import io
import json
import math

import pytest

from spade_jax.envs.library import FAMILIES, HELDOUT_FAMILIES, tool_library
from spade_jax.eval import cli, compare, harness, registry, results
from spade_jax.eval.library_suites import HeldoutGamesSuite, HeldoutToolsSuite
from spade_jax.eval.players import ScriptedPlayer
from spade_jax.eval.suite import Prompt, Sampling, empty_policy, limit_prompts, score_of
from spade_jax.spade.library_seeds import library_entries


def rec(pid, cat, sample, score, error=None):
  return {"prompt_id": pid, "category": cat, "sample": sample, "score": score, "error": error}


# ---------------------------------------------------------------------------------------------
# results


def test_mean_se_matches_hand_computation():
  m, se = results.mean_se([1.0, 2.0, 3.0, 4.0])
  # mean 2.5; sample variance (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3; SE = sqrt(5/3 / 4)
  assert m == pytest.approx(2.5)
  assert se == pytest.approx(math.sqrt(5 / 12))
  m, se = results.mean_se([0.0, 1.0])
  assert (m, se) == (pytest.approx(0.5), pytest.approx(0.5))
  assert results.mean_se([0.7]) == (pytest.approx(0.7), 0.0)
  assert all(math.isnan(x) for x in results.mean_se([]))


def test_score_of_clips_and_needs_termination():
  assert score_of(2.0, True) == 1.0
  assert score_of(-1.0, True) == 0.0
  assert score_of(0.25, True) == 0.25
  assert score_of(0.5, False) == 0.0


def test_summarize_averages_samples_per_prompt_first():
  recs = [
    # x/p1: four samples, mean 0.25 (counts once, not four times)
    *[rec("p1", "x", s, v) for s, v in enumerate([1.0, 0.0, 0.0, 0.0])],
    rec("p2", "x", 0, 1.0),
    rec("p3", "y", 0, 0.0),
    rec("p4", "y", 0, 0.0, error="RuntimeError: boom"),
    rec("p5", "y", 0, 1.0),
  ]
  s = results.summarize(recs, ["y", "x"])
  assert list(s["categories"]) == ["y", "x"]  # the given order, not first seen
  x, y = s["categories"]["x"], s["categories"]["y"]
  # per-sample pooling would give 2/5 = 0.4; avg@k over prompts gives (0.25 + 1) / 2
  assert x["mean"] == pytest.approx(0.625)
  assert x["se"] == pytest.approx(0.375)  # SE of [0.25, 1.0]: |diff| / 2
  assert x["prompts"] == 2
  assert y["mean"] == pytest.approx(1 / 3)
  assert y["se"] == pytest.approx(results.mean_se([0.0, 0.0, 1.0])[1])
  assert y["prompts"] == 3
  # overall: the unweighted mean of the categories (not of the 5 prompts: 0.45)
  assert s["overall"]["mean"] == pytest.approx((0.625 + 1 / 3) / 2)
  assert s["overall"]["se"] == pytest.approx(math.sqrt(x["se"] ** 2 + y["se"] ** 2) / 2)
  assert s["k"] == 4
  assert s["episodes"] == 8
  assert s["errors"] == 1


def test_summarize_category_order_defaults_and_extras():
  recs = [rec("p1", "b", 0, 1.0), rec("p2", "a", 0, 0.0), rec("p3", "c", 0, 1.0)]
  assert list(results.summarize(recs)["categories"]) == ["b", "a", "c"]  # as first seen
  # listed-but-absent categories are skipped, unlisted ones follow in first-seen order
  assert list(results.summarize(recs, ["c", "zzz"])["categories"]) == ["c", "b", "a"]
  empty = results.summarize([])
  assert empty["categories"] == {} and math.isnan(empty["overall"]["mean"])
  assert empty["k"] == 0 and empty["episodes"] == 0


def test_read_records_drops_torn_lines_and_keeps_appends_aligned(tmp_path):
  path = tmp_path / "suite.jsonl"
  good = [rec("p1", "x", 0, 1.0), rec("p2", "x", 0, 0.0)]
  results.append_records(path, good)
  text = path.read_text()
  # a garbled line in the middle, a JSON line that is no record, and a torn last line
  path.write_text(
    text.splitlines()[0] + "\nnot json at all\n[1, 2]\n" + text.splitlines()[1] + "\n"
    '{"prompt_id": "p3", "category": "x", "sam'
  )
  got = results.read_records(path)
  assert set(got) == {("p1", 0), ("p2", 0)}
  assert got[("p2", 0)]["score"] == 0.0
  assert path.read_text() == text  # rewritten without the bad lines, newline-terminated
  results.append_records(path, [rec("p3", "x", 0, 1.0)])
  again = results.read_records(path)
  assert set(again) == {("p1", 0), ("p2", 0), ("p3", 0)}
  assert len(path.read_text().splitlines()) == 3
  assert results.read_records(tmp_path / "missing.jsonl") == {}


def test_read_records_keeps_appends_aligned_after_a_lost_final_newline(tmp_path):
  # a write cut right before its "\n" leaves a complete record with no line end
  path = tmp_path / "suite.jsonl"
  path.write_text(json.dumps(rec("p1", "x", 0, 1.0)))
  assert set(results.read_records(path)) == {("p1", 0)}
  results.append_records(path, [rec("p2", "x", 0, 1.0)])
  text = path.read_text()
  got = results.read_records(path)
  assert set(got) == {("p1", 0), ("p2", 0)}, (
    "BUG: read_records accepts a last record without a trailing newline but does not rewrite "
    "the file, so append_records glues the next record onto the same line and both are lost "
    f"at the next read (file after the append: {text!r})"
  )


def test_paired_difference_pairs_by_prompt_id():
  a = [
    rec("p1", "x", 0, 1.0),
    rec("p1", "x", 1, 0.0),  # prompt mean 0.5
    rec("p2", "x", 0, 0.0),
    rec("p3", "x", 0, 1.0),
    rec("only_a", "x", 0, 0.0),  # ignored: B never scored it
    rec("q1", "y", 0, 0.0),
  ]
  b = [
    rec("p3", "x", 0, 0.0),  # order does not matter
    rec("p1", "x", 0, 1.0),
    rec("p2", "x", 0, 1.0),
    rec("only_b", "x", 0, 1.0),  # ignored: A never scored it
    rec("q1", "y", 0, 1.0),
  ]
  d = results.paired_difference(a, b)
  x = d["categories"]["x"]
  diffs = [1.0 - 0.5, 1.0 - 0.0, 0.0 - 1.0]  # p1, p2, p3
  assert x["prompts"] == 3
  assert x["a"] == pytest.approx(0.5)  # (0.5 + 0 + 1) / 3, only_a left out
  assert x["b"] == pytest.approx(2 / 3)  # (1 + 1 + 0) / 3, only_b left out
  assert x["diff"] == pytest.approx(sum(diffs) / 3)
  assert x["se"] == pytest.approx(results.mean_se(diffs)[1])
  # an unpaired SE (sqrt(se_a^2 + se_b^2)) would differ: the pairing is what is measured
  unpaired = math.hypot(results.mean_se([0.5, 0, 1])[1], results.mean_se([1, 1, 0])[1])
  assert x["se"] != pytest.approx(unpaired)
  y = d["categories"]["y"]
  assert (y["a"], y["b"], y["diff"], y["se"], y["prompts"]) == (0.0, 1.0, 1.0, 0.0, 1)
  o = d["overall"]
  assert o["diff"] == pytest.approx((x["diff"] + 1.0) / 2)
  assert o["se"] == pytest.approx(x["se"] / 2)
  assert o["prompts"] == 4
  assert results.paired_difference(a, [rec("zz", "x", 0, 1.0)]) == {"categories": {}}


def test_tables_show_percent():
  recs = [rec("p1", "x", 0, 0.25), rec("p2", "x", 0, 1.0), rec("p3", "y", 0, 0.0)]
  s = results.summarize(recs)
  s["metric"] = "win_rate"
  md = results.table({"toy": s})
  lines = md.splitlines()
  assert lines[0].startswith("| suite | category |")
  assert "| toy | x | win_rate | 62.5 ± 37.5 | 2 | 1 |" in lines
  assert "| toy | y | win_rate | 0.0 ± 0.0 | 1 | 1 |" in lines
  assert "| toy | **overall** | win_rate | 31.2 ± 18.8 | 3 | 1 |" in lines
  # one category: no overall row
  single = results.summarize([rec("p1", "x", 0, 1.0)])
  assert "overall" not in results.table({"one": single})

  a = [rec("p1", "x", 0, 1.0), rec("p2", "x", 0, 1.0), rec("q", "y", 0, 0.0)]
  b = [rec("p1", "x", 0, 0.0), rec("p2", "x", 0, 1.0), rec("q", "y", 0, 1.0)]
  cmp = results.comparison_table({"toy": results.paired_difference(a, b)}, "base", "new")
  rows = cmp.splitlines()
  assert rows[0] == "| suite | category | base (%) | new (%) | new − base (pp) ± SE | prompts |"
  assert "| toy | x | 100.0 | 50.0 | -50.0 ± 50.0 | 2 |" in rows
  assert "| toy | y | 0.0 | 100.0 | +100.0 ± 0.0 | 1 |" in rows
  assert "| toy | **overall** | 50.0 | 75.0 | +25.0 ± 25.0 | 3 |" in rows


# ---------------------------------------------------------------------------------------------
# harness.evaluate on a toy suite


class ToyEnv:
  """Says a number (7 x seed); terminates with reward 1 when the reply is that number, else
  asks again (reward 0.5, not terminated: a non-terminal reward must not count)."""

  def __init__(self, fail: bool):
    self.fail = fail

  def reset(self, seed=None):
    self.target = str(7 * seed)
    return f"say {self.target}", {}

  def step(self, action):
    if self.fail:
      raise RuntimeError("boom")
    if action.strip() == self.target:
      return "", 1.0, True, False, {"eval": {"ok": True}}
    return f"wrong, say {self.target}", 0.5, False, False, {}


class ToySuite:
  framing = "chat"
  system = None
  max_turns = 2
  max_new_tokens = 8
  metric = "exact"
  sampling = Sampling()

  def __init__(self, name="toy", categories=("a", "b"), per_category=3, fail=()):
    self.name, self.categories = name, categories
    self.per_category, self.fail = per_category, set(fail)

  def prompts(self):
    return [
      Prompt(f"{c}{i}", c, seed=10 * j + i + 1)
      for i in range(self.per_category)
      for j, c in enumerate(self.categories)
    ]

  def make_env(self, prompt):
    return ToyEnv(prompt.id in self.fail)

  def first_message(self, prompt, obs):
    return f"[{prompt.id}] {obs}"

  def oracle(self, prompt):
    return lambda obs, info: obs.rsplit(" ", 1)[-1]


class CountingPlayer:
  """A ScriptedPlayer that remembers every (prompt id, sample) it played, per call."""

  def __init__(self, policy_for):
    self.inner = ScriptedPlayer(policy_for)
    self.calls: list[list[tuple[str, int]]] = []

  @property
  def played(self):
    return [x for call in self.calls for x in call]

  def play(self, suite, items):
    self.calls.append([(p.id, s) for p, s in items])
    return self.inner.play(suite, items)


def oracle_on_a(suite):
  """Right on category a, silent on b."""
  return CountingPlayer(lambda p: suite.oracle(p) if p.category == "a" else empty_policy)


def no_seconds(summary):
  return {n: {k: v for k, v in s.items() if k != "seconds"} for n, s in summary.items()}


def test_evaluate_scores_and_records_episodes(tmp_path):
  suite = ToySuite()
  player = oracle_on_a(suite)
  summary = harness.evaluate([suite], lambda s: player, tmp_path)
  assert player.played == [("a0", 0), ("b0", 0), ("a1", 0), ("b1", 0), ("a2", 0), ("b2", 0)]
  s = summary["toy"]
  assert list(s["categories"]) == ["a", "b"]
  assert s["categories"]["a"] == {"mean": 1.0, "se": 0.0, "prompts": 3}
  assert s["categories"]["b"] == {"mean": 0.0, "se": 0.0, "prompts": 3}
  assert s["overall"]["mean"] == 0.5
  assert (s["k"], s["episodes"], s["errors"], s["metric"]) == (1, 6, 0, "exact")

  recs = results.read_records(tmp_path / "toy.jsonl")
  a0, b0 = recs[("a0", 0)], recs[("b0", 0)]
  assert a0["transcript"] == [
    {"role": "user", "content": "[a0] say 7"},
    {"role": "assistant", "content": "7"},
  ]
  assert (a0["score"], a0["turns"], a0["terminated"], a0["detail"]) == (1.0, 1, True, {"ok": True})
  # the empty policy: two turns, never terminated, the 0.5 non-terminal reward scores 0
  assert b0["score"] == 0.0 and b0["turns"] == 2 and not b0["terminated"] and b0["truncated"]
  assert [m["role"] for m in b0["transcript"][:4]] == ["user", "assistant", "user", "assistant"]
  assert b0["transcript"][1:3] == [
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "wrong, say 77"},
  ]
  assert b0["error"] is None and b0["detail"] is None


def test_scripted_transcript_ends_with_the_last_turn_at_the_turn_cap(tmp_path):
  # rollout.host.play (the model's path) stops at max_turns without feeding the last
  # observation back; the scripted transcript should record the same messages
  suite = ToySuite(per_category=1)
  (ep,) = ScriptedPlayer(lambda p: empty_policy).play(suite, [(suite.prompts()[0], 0)])
  assert ep.turns == suite.max_turns and not ep.terminated
  roles = [m["role"] for m in ep.transcript]
  assert roles == ["user", "assistant", "user", "assistant"], (
    "BUG: ScriptedPlayer appends the observation of the step that hit max_turns as a trailing "
    "user message no one answers; rollout.host.play (ModelPlayer) does not record it, so "
    f"scripted and model transcripts differ (players docstring: the same messages); got {roles}"
  )


def test_evaluate_resumes_and_extends_k(tmp_path):
  suite = ToySuite()
  player = oracle_on_a(suite)
  first = harness.evaluate([suite], lambda s: player, tmp_path, k=1)
  n = len(player.played)
  again = harness.evaluate([suite], lambda s: player, tmp_path, k=1)
  assert len(player.played) == n, "a second call must play nothing new"
  assert no_seconds(again) == no_seconds(first)

  more = harness.evaluate([suite], lambda s: player, tmp_path, k=3)
  new = player.played[n:]
  ids = [p.id for p in suite.prompts()]
  assert sorted(new) == sorted((pid, s) for pid in ids for s in (1, 2))  # only the 2 new samples
  assert more["toy"]["k"] == 3 and more["toy"]["episodes"] == 18
  assert more["toy"]["categories"]["a"]["mean"] == 1.0
  assert len((tmp_path / "toy.jsonl").read_text().splitlines()) == 18
  # asking for k=1 again summarizes the requested samples only, playing nothing
  back = harness.evaluate([suite], lambda s: player, tmp_path, k=1)
  assert len(player.played) == n + 12
  assert no_seconds(back) == no_seconds(first)

  with pytest.raises(ValueError):
    harness.evaluate([suite], lambda s: player, tmp_path, k=0)


def test_evaluate_limit_keeps_first_prompts_per_category(tmp_path):
  suite = ToySuite(per_category=4)
  assert [p.id for p in limit_prompts(suite.prompts(), 2)] == ["a0", "b0", "a1", "b1"]
  assert limit_prompts(suite.prompts(), None) == suite.prompts()
  player = oracle_on_a(suite)
  s = harness.evaluate([suite], lambda _: player, tmp_path, limit=1)
  assert player.played == [("a0", 0), ("b0", 0)]
  assert {c: v["prompts"] for c, v in s["toy"]["categories"].items()} == {"a": 1, "b": 1}
  harness.evaluate([suite], lambda _: player, tmp_path, limit=2)
  assert player.played[2:] == [("a1", 0), ("b1", 0)]


def test_evaluate_plays_in_flush_chunks(tmp_path):
  suite = ToySuite()
  player = oracle_on_a(suite)
  harness.evaluate([suite], lambda _: player, tmp_path, flush=4)
  assert [len(c) for c in player.calls] == [4, 2]


def test_evaluate_replays_only_a_torn_record(tmp_path):
  suite = ToySuite()
  player = oracle_on_a(suite)
  harness.evaluate([suite], lambda _: player, tmp_path)
  path = tmp_path / "toy.jsonl"
  text = path.read_text()
  path.write_text(text[: text.rstrip("\n").rfind("\n") + 1 + 20])  # tear the last record
  harness.evaluate([suite], lambda _: player, tmp_path)
  assert player.played[6:] == [("b2", 0)]
  assert len(results.read_records(path)) == 6
  assert all(json.loads(line) for line in path.read_text().splitlines())


def test_evaluate_counts_env_errors(tmp_path):
  suite = ToySuite(fail={"a1"})
  s = harness.evaluate([suite], lambda _: ScriptedPlayer(suite.oracle), tmp_path)["toy"]
  assert s["errors"] == 1
  assert s["categories"]["a"]["mean"] == pytest.approx(2 / 3)
  assert s["categories"]["b"]["mean"] == 1.0
  bad = results.read_records(tmp_path / "toy.jsonl")[("a1", 0)]
  assert bad["score"] == 0.0 and bad["error"] == "RuntimeError: boom"
  assert not bad["terminated"]
  assert bad["transcript"][0] == {"role": "user", "content": "[a1] say 14"}
  assert harness.flat_metrics({"toy": s})["eval/toy/errors"] == 1.0


def test_summary_json_merges_suites(tmp_path):
  one, two = ToySuite("toy"), ToySuite("toy2", categories=("c",), per_category=2)
  (tmp_path / "summary.json").write_text("{not json")  # a garbled summary is replaced
  s1 = harness.evaluate([one], lambda s: ScriptedPlayer(s.oracle), tmp_path)
  s2 = harness.evaluate([two], lambda s: ScriptedPlayer(lambda p: empty_policy), tmp_path)
  assert set(s2) == {"toy2"}
  on_disk = json.loads((tmp_path / "summary.json").read_text())
  assert set(on_disk) == {"toy", "toy2"}
  assert on_disk["toy"] == json.loads(json.dumps(s1["toy"]))
  assert on_disk["toy2"] == json.loads(json.dumps(s2["toy2"]))
  assert on_disk["toy"]["overall"]["mean"] == 1.0 and on_disk["toy2"]["overall"]["mean"] == 0.0
  # a later call on one suite replaces its entry and keeps the other
  harness.evaluate([one], lambda s: ScriptedPlayer(s.oracle), tmp_path, limit=1)
  on_disk = json.loads((tmp_path / "summary.json").read_text())
  assert on_disk["toy"]["episodes"] == 2 and on_disk["toy2"]["episodes"] == 2


def test_flat_metrics_names():
  summary = {
    "toy": results.summarize([rec("p1", "a", 0, 1.0), rec("p2", "b", 0, 0.0, error="E: x")]),
    "rg": results.summarize([rec("q", "math", 0, 0.5)]),
  }
  assert harness.flat_metrics(summary) == {
    "eval/toy/a": 1.0,
    "eval/toy/b": 0.0,
    "eval/toy/overall": 0.5,
    "eval/toy/errors": 1.0,
    "eval/rg/math": 0.5,
    "eval/rg/overall": 0.5,
    "eval/rg/errors": 0.0,
  }
  assert set(harness.flat_metrics(summary, prefix="val")) == {
    "val/toy/a",
    "val/toy/b",
    "val/toy/overall",
    "val/toy/errors",
    "val/rg/math",
    "val/rg/overall",
    "val/rg/errors",
  }


# ---------------------------------------------------------------------------------------------
# the CLI and compare

PAPER = ("rg_hard", "bfcl_v4", "heldout_games", "heldout_tools")
# rg_hard's full default suite builds 800 hard items (~20 s); two tasks per bucket keep the CLI
# path the same (categories, oracle, scorer) at a fraction of the cost
RG_TASKS = (
  "basic_arithmetic",
  "gcd",
  "base_conversion",
  "letter_counting",
  "bf",  # its generator prints to stdout (see test_cli_json_stdout_is_json_lines_only)
  "number_sequence",
  "mini_sudoku",
  "syllogism",
  "knights_knaves",
)


def small_rg_hard(**kw):
  from spade_jax.eval.rg_hard import RgHardSuite

  return RgHardSuite(tasks=RG_TASKS, items_per_task=1)


def run_cli(argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = cli.main(argv)
  return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
  """One workdir evaluated by both scripted policies (ground truth, then none via ``paper``)."""
  pytest.importorskip("bfcl_eval")
  work = tmp_path_factory.mktemp("evalrun")
  common = ["--workdir", str(work), "--limit", "2", "--json"]
  with pytest.MonkeyPatch.context() as mp:
    mp.setitem(registry.SUITES, "rg_hard", small_rg_hard)
    gt = run_cli([*common, "--policy", "ground_truth", "--suites", ",".join(PAPER)])
    none = run_cli([*common, "--policy", "none", "--suites", "paper"])
  return work, gt, none


def json_rows(stdout):
  """The JSON rows of a --json run (stray text before a row is checked by its own test)."""
  return [json.loads(line[line.index("{") :]) for line in stdout.splitlines()]


def test_cli_json_stdout_is_json_lines_only(cli_runs):
  # the first run in the process builds rg_hard's items, including the bf task's
  _, (rc, out, err), _ = cli_runs
  assert rc == 0, err
  bad = [line for line in out.splitlines() if not line.startswith("{")]
  assert not bad, (
    "BUG: --json stdout is not one JSON object per line: reasoning_gym's bf generator "
    "(code/contrib/bfit/Compiler/Optimizer.py: print('.', end='')) writes to stdout while "
    "rg_hard builds its datasets (unavailable() / prompts()), so the first JSON row starts with "
    f"dots: {bad[:2]}"
  )


@pytest.mark.parametrize("policy", ["ground_truth", "none"])
def test_cli_scripted_policies(cli_runs, policy):
  work, gt, none = cli_runs
  rc, out, err = gt if policy == "ground_truth" else none
  assert rc == 0, err
  rows = json_rows(out)
  assert rows and all({"suite", "category", "accuracy"} <= set(r) for r in rows)
  assert {r["suite"] for r in rows} == set(PAPER)  # "paper" expanded to the four
  for r in rows:
    if policy == "ground_truth":
      assert r["accuracy"] >= 0.95, r
    else:
      assert r["accuracy"] <= 0.05, r
  by_suite = {s: [r for r in rows if r["suite"] == s] for s in PAPER}
  assert {r["category"] for r in by_suite["heldout_games"]} == {
    "unseen_families",
    "unseen_levels",
    "overall",
  }
  assert {r["category"] for r in by_suite["heldout_tools"]} == {
    *tool_library.HELDOUT_TOOL_ENVS,
    "overall",
  }
  assert {r["category"] for r in by_suite["rg_hard"]} == {
    "math",
    "algorithmic",
    "cognition",
    "logic",
    "overall",
  }
  assert all(r["prompts"] == 2 for r in rows if r["category"] != "overall")

  out_dir = work / "eval" / policy
  summary = json.loads((out_dir / "summary.json").read_text())
  assert set(summary) == set(PAPER)
  for suite in PAPER:
    recs = [json.loads(line) for line in (out_dir / f"{suite}.jsonl").read_text().splitlines()]
    assert len(recs) == sum(v["prompts"] for v in summary[suite]["categories"].values())
    for r in recs:
      t = r["transcript"]
      assert t and t[0]["role"] == "user" and t[0]["content"], (suite, r["prompt_id"])
      assert any(m["role"] == "assistant" for m in t), (suite, r["prompt_id"])
      assert r["error"] is None, (suite, r["prompt_id"], r["error"])
      if policy == "ground_truth":
        assert r["score"] >= 0.95 and r["terminated"], (suite, r["prompt_id"])


def test_cli_rerun_plays_nothing_and_prints_markdown(cli_runs):
  work = cli_runs[0]
  path = work / "eval" / "none" / "heldout_tools.jsonl"
  before = path.read_text()
  rc, out, err = run_cli(
    ["--workdir", str(work), "--policy", "none", "--suites", "heldout_tools", "--limit", "2"]
  )
  assert rc == 0, err
  assert path.read_text() == before  # everything was already written
  assert "| heldout_tools | vehicle | success | 0.0 ± 0.0 | 2 | 1 |" in out.splitlines()
  assert "| heldout_tools | **overall** | success | 0.0 ± 0.0 | 8 | 1 |" in out.splitlines()


def test_parse_names():
  assert registry.parse_names("paper") == list(PAPER)
  assert registry.parse_names("heldout_tools, paper,rg_hard") == [
    "heldout_tools",
    "rg_hard",
    "bfcl_v4",
    "heldout_games",
  ]
  for bad in ("nope", "", " , "):
    with pytest.raises(ValueError):
      registry.parse_names(bad)


@pytest.mark.parametrize(
  "extra",
  [
    ["--suites", "heldout_tools,no_such_suite"],
    ["--suites", "heldout_tools", "--k", "0"],
    ["--suites", "heldout_tools", "--limit", "0"],
    ["--suites", "heldout_tools", "--policy", "model"],
  ],
  ids=["unknown_suite", "k0", "limit0", "model_without_config"],
)
def test_cli_bad_input_exits_2(tmp_path, capsys, extra):
  policy = [] if "--policy" in extra else ["--policy", "none"]
  rc = cli.main(["--workdir", str(tmp_path), *policy, *extra])
  out, err = capsys.readouterr()
  assert rc == 2
  assert out == ""
  lines = err.splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), err
  if "model" in extra:
    assert "config.json" in lines[0]
  if "no_such_suite" in extra:
    assert "no_such_suite" in lines[0]
  assert not (tmp_path / "eval").exists()  # nothing played


def test_compare_ground_truth_with_none(cli_runs, capsys):
  work = cli_runs[0]
  rc = compare.main([f"{work}:ground_truth", f"{work}:none", "--names", "gt,none"])
  out, err = capsys.readouterr()
  assert rc == 0, err
  lines = out.splitlines()
  assert "| heldout_tools | vehicle | 100.0 | 0.0 | -100.0 ± 0.0 | 2 |" in lines
  assert "| rg_hard | math | 100.0 | 0.0 | -100.0 ± 0.0 | 2 |" in lines

  rc = compare.main([f"{work}:ground_truth", f"{work}:none", "--json", "--suites", "bfcl_v4"])
  out, err = capsys.readouterr()
  assert rc == 0, err
  rows = json_rows(out)
  assert {r["suite"] for r in rows} == {"bfcl_v4"}
  assert len(rows) == 5  # four categories and overall
  for r in rows:
    assert (r["a"], r["b"], r["diff"], r["se"]) == (1.0, 0.0, -1.0, 0.0), r


@pytest.mark.parametrize("case", ["missing_run", "no_numeric_step", "one_run", "missing_label"])
def test_compare_bad_input_exits_2(cli_runs, tmp_path, capsys, case):
  work = cli_runs[0]
  argv = {
    "missing_run": [str(tmp_path / "nothing"), f"{work}:none"],
    "no_numeric_step": [str(work), f"{work}:none"],  # eval/ has only policy labels
    "one_run": [f"{work}:none"],
    "missing_label": [f"{work}:none", f"{work}:123"],
  }[case]
  rc = compare.main(argv)
  out, err = capsys.readouterr()
  assert rc == 2
  assert out == ""
  assert len(err.splitlines()) == 1 and err.startswith("error: "), err


def test_compare_default_label_is_largest_step(tmp_path):
  for step in ("2", "10", "base"):
    (tmp_path / "eval" / step).mkdir(parents=True)
  assert compare.eval_dir(str(tmp_path)) == tmp_path / "eval" / "10"
  assert compare.eval_dir(f"{tmp_path}:base") == tmp_path / "eval" / "base"


# ---------------------------------------------------------------------------------------------
# the held-out split


def test_heldout_names_exist():
  # otherwise the disjointness checks below would pass vacuously
  assert HELDOUT_FAMILIES and set(HELDOUT_FAMILIES) <= set(FAMILIES)
  assert tool_library.HELDOUT_TOOL_ENVS
  assert set(tool_library.HELDOUT_TOOL_ENVS) <= set(tool_library.TOOL_ENVS)


@pytest.mark.parametrize("kind", ["game", "tool"])
def test_training_library_excludes_heldout_and_keeps_every_skill(kind):
  if kind == "game":
    every, heldout = FAMILIES, set(HELDOUT_FAMILIES)
  else:
    every, heldout = tool_library.TOOL_ENVS, set(tool_library.HELDOUT_TOOL_ENVS)
  entries = library_entries(kind)
  names = [e.name for e in entries]
  assert not heldout & set(names), f"held-out {kind} environments in the training library"
  assert set(names) == set(every) - heldout  # every other environment trains
  assert len(names) == len(set(names))
  assert {e.skill for e in entries} == {v.skill for v in every.values()}, (
    f"a {kind} skill lost all its training environments"
  )


def test_heldout_games_suite_covers_exactly_the_heldout_families():
  suite = HeldoutGamesSuite(seeds_per_setting=2)
  prompts = suite.prompts()
  by_cat = {}
  for p in prompts:
    by_cat.setdefault(p.category, set()).add(p.data[0])
  assert set(by_cat) == {"unseen_families", "unseen_levels"}
  assert by_cat["unseen_families"] == set(HELDOUT_FAMILIES)
  assert by_cat["unseen_levels"] and not by_cat["unseen_levels"] & set(HELDOUT_FAMILIES)
  assert by_cat["unseen_levels"] <= {e.name for e in library_entries("game")}
  # every level of every held-out family; training families only at their hardest level
  for name in HELDOUT_FAMILIES:
    levels = {p.id.split("/")[1] for p in prompts if p.data[0] == name}
    assert levels == {f"L{lv}" for lv in range(len(FAMILIES[name].levels))}, name
  for p in prompts:
    if p.category == "unseen_levels":
      assert p.id.split("/")[1] == f"L{len(FAMILIES[p.data[0]].levels) - 1}", p.id


def test_heldout_tools_suite_covers_exactly_the_heldout_domains():
  prompts = HeldoutToolsSuite(seeds_per_env=3).prompts()
  assert {p.category for p in prompts} == set(tool_library.HELDOUT_TOOL_ENVS)
  assert {p.data for p in prompts} == set(tool_library.HELDOUT_TOOL_ENVS)
  assert all(p.category == p.data for p in prompts)
  assert len(prompts) == 3 * len(tool_library.HELDOUT_TOOL_ENVS)


@pytest.mark.parametrize("make", [HeldoutGamesSuite, HeldoutToolsSuite], ids=["games", "tools"])
def test_heldout_prompt_ids_unique_and_stable(make):
  a, b = make().prompts(), make().prompts()
  ids = [p.id for p in a]
  assert len(ids) == len(set(ids))
  assert [(p.id, p.category, p.seed) for p in a] == [(p.id, p.category, p.seed) for p in b]
  assert len({p.seed for p in a}) > 1  # samples of different prompts play different instances
