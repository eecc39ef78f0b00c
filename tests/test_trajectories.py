"""Trajectories: construction from ragged lists, mixing/padding to the global batch, sharding."""

import jax
import numpy as np
import pytest

from spade_jax import sharding
from spade_jax import trajectories as tj


def _designer():
  return tj.from_sequences(
    [[5, 6, 7, 8], [5, 6, 9]],
    [[0, 0, 1, 1], [0, 1, 1]],
    [[9.0, 9.0, -0.5, -0.25], [9.0, -1.0, -2.0]],
    role=tj.ROLE_DESIGNER,
    rewards=[0.3, -0.3],
    advantages=[0.3, -0.3],
    group_id=[0, 1],
  )


def _agent(n=3):
  toks = [[1, 2, 3, 4, 5, 6][: 3 + i] for i in range(n)]
  masks = [[0, 1, 0, 1, 1, 0][: 3 + i] for i in range(n)]
  lps = [[-0.1 * (j + 1) for j in range(3 + i)] for i in range(n)]
  return tj.from_sequences(
    toks,
    masks,
    lps,
    role=tj.ROLE_AGENT,
    rewards=[1.0] * n,
    advantages=np.arange(n, dtype=np.float32),
    group_id=0,
    turns=2,
  )


def test_from_sequences_pads_and_zeroes_offmask_logprobs():
  d = _designer()
  assert d.tokens_BT.shape == (2, 4) and d.tokens_BT.dtype == np.int32
  assert d.tokens_BT[1].tolist() == [5, 6, 9, tj.PAD_ID]
  assert d.loss_mask_BT.tolist() == [[0, 0, 1, 1], [0, 1, 1, 0]]
  # the log-prob of an untrained token is zeroed whatever the producer wrote
  np.testing.assert_allclose(d.rollout_logprobs_BT, [[0, 0, -0.5, -0.25], [0, -1, -2, 0]])
  assert d.role_B.tolist() == [tj.ROLE_DESIGNER] * 2
  assert d.valid_B.tolist() == [True, True]
  assert d.num_loss_tokens() == 4
  assert d.turns_B.tolist() == [1, 1]


def test_from_sequences_rejects_bad_input():
  with pytest.raises(ValueError, match="position 0"):
    tj.from_sequences([[1, 2]], [[1, 1]], [[0, 0]], role=0)
  with pytest.raises(ValueError, match="exceeds seq_len"):
    tj.from_sequences([[1, 2, 3]], [[0, 1, 1]], [[0, 0, 0]], role=0, seq_len=2)
  with pytest.raises(ValueError, match="sample 0"):
    tj.from_sequences([[1, 2, 3]], [[0, 1]], [[0, 0, 0]], role=0)
  with pytest.raises(ValueError, match="unknown roles"):
    tj.from_sequences([[1, 2]], [[0, 1]], [[0, 0]], role=7)
  with pytest.raises(ValueError, match="rewards"):
    tj.from_sequences([[1, 2]], [[0, 1]], [[0, 0]], role=0, rewards=[1.0, 2.0])


def test_mixed_batch_designer_first_then_agent_padded():
  batch, trimmed = tj.mixed_batch(_designer(), _agent(3), global_batch=8)
  assert trimmed == 0
  assert batch.tokens_BT.shape == (8, 5)  # longest agent sequence
  assert batch.role_B.tolist()[:5] == [1, 1, 0, 0, 0]
  assert batch.valid_B.tolist() == [True] * 5 + [False] * 3
  pads = batch.select(~batch.valid_B)
  assert pads.loss_mask_BT.sum() == 0 and pads.advantages_B.sum() == 0
  assert np.all(pads.tokens_BT == tj.PAD_ID)
  assert batch.num_loss_tokens() == _designer().num_loss_tokens() + _agent(3).num_loss_tokens()


def test_mixed_batch_trims_agent_tail():
  batch, trimmed = tj.mixed_batch(_designer(), _agent(4), global_batch=4)
  assert trimmed == 2
  assert batch.role_B.tolist() == [1, 1, 0, 0]
  np.testing.assert_allclose(batch.advantages_B, [0.3, -0.3, 0.0, 1.0])
  empty, _ = tj.mixed_batch(None, None, global_batch=2, seq_len=3)
  assert empty.tokens_BT.shape == (2, 3) and not empty.valid_B.any()


def test_pad_errors():
  with pytest.raises(ValueError, match="exceeds batch_size"):
    tj.pad_batch(_agent(3), 2)
  with pytest.raises(ValueError, match="cannot pad"):
    tj.pad_length(_agent(3), 2)


def test_shardings_put_batch_axis_on_data_and_fsdp():
  mesh = sharding.make_mesh((2, 2, 2))
  batch, _ = tj.mixed_batch(_designer(), _agent(3), global_batch=8)
  placed = jax.device_put(batch, tj.shardings(mesh, batch))
  spec = placed.tokens_BT.sharding.spec
  assert spec[0] == ("data", "fsdp")
  assert placed.advantages_B.sharding.spec[0] == ("data", "fsdp")
  assert len(placed.tokens_BT.addressable_shards[0].data) == 2
  np.testing.assert_array_equal(np.asarray(placed.tokens_BT), batch.tokens_BT)
