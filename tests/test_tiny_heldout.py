"""The tiny front end's library split: held-out settings are never training environments (warm
start, fixed pool), and the held-out evaluation reports consistent per-group accuracies."""

import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from spade_jax.tiny import warmstart
from spade_jax.tiny.heldout import (
  HELDOUT_FAMILIES,
  LibraryPrograms,
  TinyHeldout,
  greedy_rollout,
  heldout_settings,
  split_families,
  training_settings,
)
from spade_jax.tiny.setup import TinySetup

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup():
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  return TinySetup(tiny.get_config("smoke"))


def test_settings_partition_the_library(setup):
  lib, max_level = setup.library, setup.config.warm_start.max_level
  held = heldout_settings(lib, max_level)
  train = training_settings(lib, max_level)
  everything = {(n, lv) for n in lib.by_family for lv in lib.by_family[n]}
  held_pairs = {(n, lv) for n, lv, _ in held}
  assert held_pairs.isdisjoint(train)
  assert held_pairs | set(train) == everything
  assert {n for n, _, g in held if g == "unseen_families"} == set(HELDOUT_FAMILIES)
  assert all(
    lv > max_level and n not in HELDOUT_FAMILIES for n, lv, g in held if g == "unseen_levels"
  )
  assert any(g == "unseen_levels" for *_, g in held)
  assert all(n not in HELDOUT_FAMILIES and lv <= max_level for n, lv in train)


def test_a_runs_families_train_and_the_rest_are_held_out(setup):
  names = ["argmax", "modular", "logic", "nim", "counting"]
  assert split_families(names) == (("argmax", "counting", "modular"), ("logic", "nim"))
  assert split_families(names, ("modular",)) == (
    ("modular",),
    ("argmax", "counting", "logic", "nim"),
  )
  for wrong in (("nim",), ("no_such_family",)):
    with pytest.raises(ValueError, match="not training families"):
      split_families(names, wrong)
  lib = setup.library
  only = LibraryPrograms(lib.by_family, lib.tokens, lib.texts, ("argmax", "modular"))
  max_level = setup.config.warm_start.max_level
  assert {n for n, _ in training_settings(only, max_level)} == {"argmax", "modular"}
  held = heldout_settings(only, max_level)
  assert {n for n, _, g in held if g == "unseen_levels"} <= {"argmax", "modular"}
  left_out = set(lib.split()[0]) - {"argmax", "modular"}
  assert {n for n, _, g in held if g == "unseen_families"} == set(HELDOUT_FAMILIES) | left_out
  everything = {(n, lv) for n in lib.by_family for lv in lib.by_family[n]}
  assert {(n, lv) for n, lv, _ in held} | set(training_settings(only, max_level)) == everything


def _same(a, b):
  a, b = jax.tree.leaves(a), jax.tree.leaves(b)
  return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_warm_start_and_fixed_pool_use_training_settings_only(setup):
  lib, max_level = setup.library, setup.config.warm_start.max_level
  held = [lib.tokens[(n, lv)] for n, lv, _ in heldout_settings(lib, max_level)]
  for prompt, response in warmstart.designer_examples(setup):
    for toks in held:  # neither the response nor a memory seed in the prompt is held out
      assert response[: len(toks)] != toks
      assert not any(prompt[i : i + len(toks)] == toks for i in range(len(prompt) - len(toks) + 1))
  held_programs = [lib.by_family[n][lv] for n, lv, _ in heldout_settings(lib, max_level)]
  for step in range(0, 12, setup.config.spade.regen_interval):
    pool = setup.fixed_pool(step)
    for g in range(setup.config.spade.num_games):
      one = jax.tree.map(lambda x, g=g: np.asarray(x)[g], pool)
      assert not any(_same(one, h) for h in held_programs)


def test_evaluation_reports_groups_and_families(setup, tmp_path):
  graphdef, state, _ = setup.init_state()
  ev = TinyHeldout(
    graphdef,
    state.params,
    setup.tok,
    setup.framing,
    setup.library,
    setup.config,
    spec=setup.rollout_spec,
  )
  n_settings = len(heldout_settings(setup.library, setup.config.warm_start.max_level))
  assert len(ev.programs) == n_settings * setup.config.eval.episodes_per_setting
  m = ev.evaluate(state.params)
  assert set(m) >= {"eval/accuracy", "eval/unseen_levels", "eval/unseen_families"}
  assert m.pop("eval/episodes") == len(ev.programs)
  assert all(0.0 <= v <= 1.0 for v in m.values())
  groups = np.asarray(ev.groups)
  weighted = sum(m[f"eval/{g}"] * np.mean(groups == g) for g in set(ev.groups))
  assert m["eval/accuracy"] == pytest.approx(weighted)
  # greedy, fixed seeds: deterministic; with a path, one JSON line per episode in order
  again = ev.evaluate(state.params, tmp_path / "eval.jsonl")
  assert again.pop("eval/episodes") == len(ev.programs) and again == m
  lines = [json.loads(x) for x in (tmp_path / "eval.jsonl").read_text().splitlines()]
  assert [(e["family"], e["group"], e["seed"]) for e in lines] == list(
    zip(ev.families, ev.groups, ev.seeds)
  )
  assert np.mean([e["solved"] for e in lines]) == pytest.approx(m["eval/accuracy"])


def test_greedy_rollout_uses_the_runs_limits_and_layout(setup):
  graphdef, state, _ = setup.init_state()
  c, rs = setup.config, setup.rollout_spec
  device = greedy_rollout(
    graphdef, state.params, setup.tok, setup.framing, c, rs, script_turns=1, script_width=7
  )
  assert device.cfg.greedy
  assert (device.cfg.max_turns, device.cfg.max_new_tokens, device.cfg.max_context) == (
    c.agent.max_turns,
    c.agent.max_new_tokens,
    c.agent.max_context,
  )
  s = device.spec
  assert (s.prompt_len, s.feed_chunk, s.program_cfg) == (
    rs.prompt_len,
    rs.feed_chunk,
    rs.program_cfg,
  )
  assert (s.script_turns, s.script_width) == (1, 7)
