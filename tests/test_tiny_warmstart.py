"""The tiny warm start: supervised steps lower the NLL of both roles, leave the RL phase's step
and optimizer fresh, and (with ``train.kl_coef > 0``) make the warm policy the KL reference;
its scanned steps are the per-batch updates they replace."""

import functools
import sys
import types
from pathlib import Path

import jax
import numpy as np
import pytest

from spade_jax.tiny import warmstart
from spade_jax.tiny.heldout import training_settings
from spade_jax.tiny.setup import TinySetup
from spade_jax.tiny.warmstart import designer_examples, warm_start

REPO = Path(__file__).resolve().parents[1]


def config(reference_plays=0, **train):
  sys.path.insert(0, str(REPO / "experiments" / "configs"))
  import tiny

  c = tiny.get_config("smoke")
  c.warm_start.steps = 6
  c.designer.reference_plays = reference_plays
  c.train.update(train)
  return c


def _leaves_equal(a, b):
  return all(
    np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
  )


@pytest.mark.parametrize("kl_coef, reference_plays", [(0.0, 0), (0.05, 4)])
def test_warm_start_trains_both_roles_and_sets_the_reference(kl_coef, reference_plays):
  setup = TinySetup(config(reference_plays, kl_coef=kl_coef, schedule="cosine", min_lr_ratio=0.1))
  graphdef, state, _ = setup.init_state()
  before = jax.tree.map(np.asarray, state.params)
  assert (state.ref_params is not None) == (kl_coef > 0)
  state, m = warm_start(graphdef, state, setup)
  assert m["warm/oracle_solve_rate"] == 1.0  # library programs and difficulty variants alike
  n_var, c = m["warm/variants"], setup.config.warm_start
  assert len(setup.train_families) <= n_var <= c.variants * len(setup.train_families)
  assert m["warm/designer_examples"] == len(designer_examples(setup)) + n_var
  n_lib = len(training_settings(setup.library, c.max_level))
  assert m["warm/agent_examples"] == 2 * (
    n_lib * c.episodes_per_program + n_var * c.variant_episodes
  )
  assert m["warm/designer_nll_last"] < m["warm/designer_nll_first"]
  assert m["warm/agent_nll_last"] < m["warm/agent_nll_first"]
  assert int(state.step) == 0  # the RL schedule starts at its beginning
  assert not _leaves_equal(state.params, before)
  if kl_coef:
    assert _leaves_equal(state.ref_params, state.params)
  else:
    assert state.ref_params is None


def test_reference_plays_alone_keep_a_frozen_reference():
  """The difficulty yardstick (designer/difficulty_ref) needs the reference policy even
  without a KL term; the warm start then sets it (test above)."""
  _, state, _ = TinySetup(config(4)).init_state()
  assert state.ref_params is not None
  assert _leaves_equal(state.ref_params, state.params)


def test_memory_seeded_designer_examples_only_with_memory_on():
  """Seeded designer prompts (a same-skill program as memory seed) are the loop's prompt format
  only with ``spade.memory`` on; off, the warm start shows plain prompts alone."""
  c = config()
  setup = TinySetup(c)
  plain = designer_examples(setup)
  n_lib = len(training_settings(setup.library, c.warm_start.max_level))
  assert len(plain) == n_lib
  c.spade.memory = True
  setup = TinySetup(c)
  both = designer_examples(setup)
  assert len(both) > n_lib
  plain_prompts = [p for p, _ in plain]
  seeded = [(p, r) for p, r in both if p not in plain_prompts]
  assert len(seeded) == len(both) - n_lib  # the extra rows are exactly the seeded prompts
  assert all(len(p) > min(map(len, plain_prompts)) for p, _ in seeded)
  assert all(r in [r2 for _, r2 in plain] for _, r in seeded)  # same programs, new prompt


def test_draw_indices_per_step_in_kind_order():
  idx = warmstart.draw_indices(3, 5, [(10, 4), (2, 3)])
  assert [a.shape for a in idx] == [(5, 4), (5, 3)]
  rng = np.random.default_rng([3, 11])  # the draws of the per-batch loop, in its order
  for t in range(5):
    assert np.array_equal(idx[0][t], rng.choice(10, size=4, replace=False))
    assert np.array_equal(idx[1][t], rng.choice(2, size=3, replace=True))
  assert all(len(set(row)) == 4 for row in idx[0])  # without replacement where rows suffice


def test_scanned_steps_equal_one_call_per_batch():
  """`sft_steps` (one jitted scan, rows gathered on device) against the loop it replaced (one
  jitted `train_step` per batch, rows selected on the host): the same updates in the same
  order, equal up to float rounding (XLA fuses the scan body differently)."""
  setup = TinySetup(config())
  graphdef, state, _ = setup.init_state()
  designer = designer_examples(setup)
  # stand-ins for the oracle episodes (no rollout to compile): shorter rows of another length
  short = [r[:20] for _, r in designer] * 3
  episodes = types.SimpleNamespace(
    tokens=short, loss_mask=[[0] + [1] * (len(t) - 1) for t in short], solved=[True] * len(short)
  )
  d_rows, a_rows = warmstart.sft_rows(designer, episodes)
  assert a_rows.seq_len < d_rows.seq_len
  kinds = (a_rows, 8), (d_rows, 2)
  idx = warmstart.draw_indices(0, 3, [(r.batch_size, n) for r, n in kinds])
  step, optimizer = warmstart.sft_step(graphdef, setup)
  warm = state.replace(opt_state=optimizer.init(state.params))
  s, nll, step_fn = warm, ([], []), jax.jit(step)
  for t in range(3):
    for k, (r, _) in enumerate(kinds):
      s, m = step_fn(s, r.select(idx[k][t]))
      nll[k].append(float(m["train/nll"]))
  scanned, scan_nll = jax.jit(functools.partial(warmstart.sft_steps, step))(
    warm, tuple(r for r, _ in kinds), idx
  )
  assert int(scanned.step) == int(s.step) == 6
  for k in range(2):
    np.testing.assert_allclose(scan_nll[k], nll[k], rtol=1e-5)
  assert nll[0][2] < nll[0][0]  # it trains
  # float rounding of differently fused programs, through six Adam steps (Adam divides by the
  # gradient's own scale, so small entries move by relative amounts): with the written-out
  # backwards one entry of 98304 differed by 2.4e-6 (BUILD_NOTES: 1.9e-5 after 40 steps)
  for a, b in zip(jax.tree.leaves(scanned.params), jax.tree.leaves(s.params), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
