"""The Python-environment loop's agent batch: advantage mode and DAPO dynamic sampling
(`train.dynamic_sampling`). Episodes come from a scripted `_run` (one returns table per round of
plays), so the test exercises exactly the batch assembly: flat groups dropped, the batch
refilled from further rounds on fresh seeds, trimmed to one group per valid game."""

import numpy as np
import pytest

from spade_jax.rollout import host as host_rollout
from spade_jax.spade import agent as agent_lib
from spade_jax.spade.designer import derive_seed

P = 4
# returns of each round of unhinted plays, [game][play]; game 3 is an invalid slot (None)
ROUNDS = [
  [[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]],  # only game 0 informative
  [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]],  # only game 1
  [[1, 1, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]],  # games 0 and 1
]


def _player(monkeypatch, **kw):
  monkeypatch.setattr(agent_lib.ChatFraming, "from_tokenizer", lambda tok, system=None: None)
  player = agent_lib.AgentPlayer(None, None, None, None, plays=P, hint_plays=2, **kw)
  player.games = [object(), object(), object(), None]
  calls = []

  def run(episodes, seeds, sample_seed, params):
    k = len(calls)
    calls.append((list(episodes), list(seeds), sample_seed))
    n = len(episodes)
    reward = np.array([1.0 if hinted else ROUNDS[k][g][p] for g, p, hinted in episodes], np.float32)
    return host_rollout.EpisodeResult(
      tokens=[[1, 10 + g, 20 + p, 30 + k] for g, p, _ in episodes],
      loss_mask=[[0, 1, 1, 1]] * n,
      logprobs=[[0.0, -1.0, -1.0, -1.0]] * n,
      reward=reward,
      turns=np.ones(n, np.int32),
      terminated=np.ones(n, bool),
      truncated=np.zeros(n, bool),
      crashed=np.zeros(n, bool),
      collateral=np.zeros(n, bool),
      errors=[None] * n,
      transcripts=[[]] * n,
    )

  monkeypatch.setattr(player, "_run", run)
  return player, calls


def _rows(batch):
  """(game, play, round) of each valid row, from the scripted tokens."""
  toks = np.asarray(batch.tokens_BT)[np.asarray(batch.valid_B)]
  return [(t[1] - 10, t[2] - 20, t[3] - 30) for t in toks]


def test_default_trains_every_group_of_one_round(monkeypatch):
  player, calls = _player(monkeypatch)
  out = player.play(step=2, seed=5, with_hints=True)
  assert len(calls) == 1
  assert _rows(out.agent_batch) == [(g, p, 0) for g in range(3) for p in range(P)]
  adv = np.asarray(out.agent_batch.advantages_B)[:12]
  np.testing.assert_allclose(adv[:4], [1, -1, 1, -1], atol=1e-6)
  assert np.all(adv[4:] == 0.0)  # flat groups stay in the batch with advantage 0
  assert not any(k.startswith("agent/dynamic") for k in out.metrics)


def test_center_advantages(monkeypatch):
  player, _ = _player(monkeypatch, advantage="center")
  out = player.play(step=2, seed=5, with_hints=False)
  np.testing.assert_allclose(out.agent_batch.advantages_B[:4], [0.5, -0.5, 0.5, -0.5])


def test_flat_groups_dropped_and_batch_refilled(monkeypatch):
  player, calls = _player(monkeypatch, dynamic_sampling=True, dynamic_rounds=3)
  out = player.play(step=2, seed=5, with_hints=True)
  assert len(calls) == 3
  # one informative group per valid game (3): round 0 game 0, round 1 game 1, round 2 game 0
  # (round 2's game 1 is trimmed off); flat groups (game 2 always) never enter the batch
  want = [(0, p, 0) for p in range(P)] + [(1, p, 1) for p in range(P)]
  want += [(0, p, 2) for p in range(P)]
  assert _rows(out.agent_batch) == want
  G = len(player.games)
  valid = np.asarray(out.agent_batch.valid_B)
  assert (
    np.asarray(out.agent_batch.group_id_B)[valid].tolist() == [0] * 4 + [G + 1] * 4 + [2 * G] * 4
  )
  s3 = np.sqrt(3.0)
  np.testing.assert_allclose(
    np.asarray(out.agent_batch.advantages_B)[valid],
    [1, -1, 1, -1, s3, -1 / s3, -1 / s3, -1 / s3, 1, 1, -1, -1],
    rtol=1e-6,
  )
  assert out.metrics["agent/dynamic_rounds"] == 3.0
  assert out.metrics["agent/dynamic_dropped_groups"] == 5.0  # 2 + 2 + 1 flat valid games
  assert out.metrics["agent/dynamic_groups"] == 3.0
  # the extra rounds: unhinted plays of the valid games only, on fresh seeds
  first_seeds = {derive_seed(5, 2, g, p) for g in range(3) for p in range(P)}
  assert set(calls[0][1]) == first_seeds
  for k in (1, 2):
    episodes, seeds, _ = calls[k]
    assert episodes == [(g, p, False) for g in range(3) for p in range(P)]
    assert not set(seeds) & first_seeds
  assert len({c[2] for c in calls}) == 3  # a sampling seed per round
  # only the first round enters the window statistics and metrics
  np.testing.assert_array_equal(out.returns_GP, np.array(ROUNDS[0], np.float32))
  assert out.metrics["agent/episodes"] == 12.0


def test_refill_stops_at_the_round_limit(monkeypatch):
  player, calls = _player(monkeypatch, dynamic_sampling=True, dynamic_rounds=2)
  out = player.play(step=0, seed=1, with_hints=False)
  assert len(calls) == 2
  assert _rows(out.agent_batch) == [(0, p, 0) for p in range(P)] + [(1, p, 1) for p in range(P)]
  assert out.metrics["agent/dynamic_groups"] == 2.0


def test_one_round_only_filters(monkeypatch):
  player, calls = _player(monkeypatch, dynamic_sampling=True, dynamic_rounds=1)
  out = player.play(step=0, seed=1, with_hints=False)
  assert len(calls) == 1
  assert _rows(out.agent_batch) == [(0, p, 0) for p in range(P)]


def test_bad_options_rejected(monkeypatch):
  with pytest.raises(ValueError, match="advantage"):
    _player(monkeypatch, advantage="grpo")
  with pytest.raises(ValueError, match="dynamic_rounds"):
    _player(monkeypatch, dynamic_sampling=True, dynamic_rounds=0)
