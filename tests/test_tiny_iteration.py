"""The jitted tiny SPADE iteration: bounded compilation, no host transfer inside, delayed and
validity-gated designer credit, the difficulty proxy."""

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from spade_jax.envs.ir.program import MODE_IMM, MODE_REG, OPCODE, stack_programs
from spade_jax.tiny import iteration, pool
from spade_jax.tiny.setup import TinySetup, place

REPO = Path(__file__).resolve().parents[1]


def small_config():
  """The smoke config unchanged: its programs are then compiled once per test session (the
  persistent cache serves test_tiny_train.py and the notebook test)."""
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  return tiny.get_config("smoke")


@pytest.fixture(scope="module")
def setup_state():
  setup = TinySetup(small_config())
  graphdef, state, carry = setup.init_state()
  # placed like a run's, so the smoke runs of test_tiny_train.py and the notebook load these
  # executables from the persistent cache
  state, carry = place((state, carry))
  return setup, graphdef, state, carry


def test_difficulty_bits_counts_immediate_rand_ranges(setup_state):
  setup = setup_state[0]
  prog = next(iter(setup.library.by_family[setup.train_families[0]].values()))
  code = np.zeros_like(np.asarray(prog.reset_code))
  code[0] = (OPCODE["rand"], 0, MODE_IMM, 1, MODE_IMM, 8, 0, 0)  # 8 values: 3 bits
  code[1] = (OPCODE["rand"], 1, MODE_IMM, -5, MODE_IMM, 10, 0, 0)  # 16 values: 4 bits
  code[2] = (OPCODE["rand"], 2, MODE_IMM, 0, MODE_REG, 1, 0, 0)  # register bound: not counted
  code[3] = (OPCODE["add"], 3, MODE_IMM, 1, MODE_IMM, 100, 0, 0)
  progs = stack_programs([prog.replace(reset_code=code), prog])
  bits = np.asarray(pool.difficulty_bits(progs))
  assert bits[0] == pytest.approx(7.0)
  assert bits[1] >= 0


def test_iterations_compile_once_per_variant_without_host_transfers(setup_state):
  setup, graphdef, state, carry = setup_state
  iteration.iterate.clear_cache()  # other tests may have traced the same shapes in-process
  before = dict(iteration.TRACES)
  outs = []
  for step in range(4):  # regen, replay, regen, replay
    regen = step % setup.config.spade.regen_interval == 0
    inputs = place(setup.inputs(step, None))
    with jax.transfer_guard("disallow"):
      state, carry, out = iteration.iterate(
        graphdef, state, carry, inputs, spec=setup.spec, regen=regen
      )
    outs.append(jax.device_get(out))
  delta = {k: v - before.get(k, 0) for k, v in iteration.TRACES.items()}
  assert {k: v for k, v in delta.items() if v} == {
    "iterate/regen=True": 1,
    "iterate/regen=False": 1,
  }
  G = setup.config.spade.num_games
  # step 0: a new pool, nothing to credit yet; step 2: step 0's pool is credited, only the
  # programs that assembled and passed check_program
  assert "prev" not in outs[0] or not np.any(outs[0]["prev"]["trained_G"])
  valid0 = np.asarray(outs[0]["records"]["ok_G"])
  assert valid0.shape == (G,)
  np.testing.assert_array_equal(outs[2]["prev"]["trained_G"], valid0)
  assert outs[2]["designer/trained_samples"] == valid0.sum()
  assert outs[2]["train/designer_samples"] == valid0.sum()
  # replay steps train the agent only
  assert outs[1]["train/designer_samples"] == 0
  for o in outs:
    assert np.isfinite(o["train/loss"])
    assert o["train/agent_samples"] <= G * setup.config.spade.plays
  # every slot is played: its first valid attempt, else a fallback game (never credited)
  for o in (outs[0], outs[2]):
    rec = o["records"]
    np.testing.assert_array_equal(rec["source_G"] == 0, rec["ok_G"])
    assert np.all(rec["played_G"])
    assert np.all(np.isin(rec["source_G"], [0, 1, 2]))
    np.testing.assert_array_equal(rec["valid_G"], rec["ok_G"])


def test_choose_slots_first_valid_attempt_then_won_previous_game_then_library():
  T, F = True, False
  ok_GK = np.array([[F, T, T], [F, F, F], [F, F, F], [T, F, F], [F, F, F]])
  prev_valid_G = np.array([T, T, T, T, F])
  prev_win_G = np.array([0.5, 0.25, 0.0, 0.0, 1.0])
  s = jax.jit(pool.choose_slots, static_argnums=3)(ok_GK, prev_valid_G, prev_win_G, True)
  assert np.asarray(s.row_G).tolist() == [1, 3, 6, 9, 12]  # g * 3 + first valid (else 0)
  assert np.asarray(s.designed_G).tolist() == [T, F, F, T, F]
  # game 1: the previous game was won once -> replayed; game 2: never won -> library;
  # game 4: the previous slot was not played (invalid) -> library
  assert np.asarray(s.carried_G).tolist() == [F, T, F, F, F]
  assert np.asarray(s.library_G).tolist() == [F, F, T, F, T]
  assert [iteration.SOURCES[i] for i in np.asarray(s.source_G)] == [
    "new",
    "carried",
    "library",
    "new",
    "library",
  ]
  off = pool.choose_slots(ok_GK, prev_valid_G, prev_win_G, False)
  assert not np.any(off.carried_G) and not np.any(off.library_G)
  assert np.asarray(off.source_G).tolist() == [0, 3, 3, 0, 3]
