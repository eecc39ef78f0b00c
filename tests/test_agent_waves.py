"""Sampling in waves. `agent.wave_size`: the agent's episodes are sampled in waves of at most that
many, on the host and on device alike, and merged back in episode order. `designer.wave_size`:
the designer's (and the hint writer's) prompts likewise. The rollouts and the engine are
scripted, so the tests see exactly what each wave is given and that each result lands at its
index."""

import numpy as np
import pytest

from spade_jax.rollout import host as host_rollout
from spade_jax.spade import agent as agent_lib
from spade_jax.spade.designer import derive_seed


def _result(values: list[float]) -> host_rollout.EpisodeResult:
  n = len(values)
  return host_rollout.EpisodeResult(
    tokens=[[1, int(v)] for v in values],
    loss_mask=[[0, 1]] * n,
    logprobs=[[0.0, -1.0]] * n,
    reward=np.asarray(values, np.float32),
    turns=np.ones(n, np.int32),
    terminated=np.ones(n, bool),
    truncated=np.zeros(n, bool),
    crashed=np.zeros(n, bool),
    collateral=np.zeros(n, bool),
    errors=[None] * n,
    transcripts=[[]] * n,
  )


class _Device:
  """A scripted on-device rollout: episode value = 1000 + seed."""

  def __init__(self):
    self.calls = []

  def __call__(self, programs, seeds, hinted, *, seed, params):
    self.calls.append((list(seeds), seed))
    out = _result([1000.0 + s for s in seeds])
    return type("Out", (), {"episodes": lambda self_, tok, framing: out})()


def _player(monkeypatch, wave: int):
  monkeypatch.setattr(agent_lib.ChatFraming, "from_tokenizer", lambda tok, system=None: None)
  device = _Device()
  player = agent_lib.AgentPlayer(None, None, None, None, plays=3, hint_plays=0, wave=wave)
  player.device = device
  player.games = [type("G", (), {"program": g, "hint": None})() for g in range(4)]
  player.on_device = {1, 3}  # games 1 and 3 play on device, 0 and 2 on the host
  player._instances = {g: [object()] * 3 for g in range(4)}
  host_calls = []

  def play(engine, tok, framing, envs, seeds, first_message, cfg, *, seed, params):
    host_calls.append((list(seeds), seed))
    return _result([float(s) for s in seeds])

  monkeypatch.setattr(host_rollout, "play", play)
  return player, host_calls, device.calls


EPISODES = [(g, p, False) for g in range(4) for p in range(3)]  # 6 host, 6 device episodes
SEEDS = [100 + i for i in range(len(EPISODES))]


@pytest.mark.parametrize("wave", [0, 4, 6, 100])
def test_waves_bound_each_call_and_merge_in_episode_order(monkeypatch, wave):
  player, host_calls, dev_calls = _player(monkeypatch, wave)
  res = player._run(EPISODES, SEEDS, sample_seed=7, params=None)
  want = [float(s) + (1000.0 if g in (1, 3) else 0.0) for (g, _, _), s in zip(EPISODES, SEEDS)]
  np.testing.assert_array_equal(res.reward, want)
  assert [t[1] for t in res.tokens] == [int(v) for v in want]
  size = wave or 6
  for calls, games in ((host_calls, (0, 2)), (dev_calls, (1, 3))):
    mine = [s for (g, _, _), s in zip(EPISODES, SEEDS) if g in games]
    assert [seeds for seeds, _ in calls] == [mine[a : a + size] for a in range(0, 6, size)]
    # wave 0 samples with the step's seed (so wave_size >= episodes changes nothing), the
    # others with seeds derived from it
    assert [seed for _, seed in calls] == [7] + [derive_seed(7, w) for w in range(1, len(calls))]


def test_negative_wave_is_refused(monkeypatch):
  monkeypatch.setattr(agent_lib.ChatFraming, "from_tokenizer", lambda tok, system=None: None)
  with pytest.raises(ValueError, match="wave must be >= 0"):
    agent_lib.AgentPlayer(None, None, None, None, plays=3, hint_plays=0, wave=-1)


class _Engine:
  """A scripted engine: each sequence's reply is its prompt's first token and the wave's seed."""

  def __init__(self):
    self.waves = []

  def bucket(self, n):
    return 64

  def init(self, prompts, *, max_new_tokens, cache_size, stop_token_ids, seed, params):
    self.waves.append((len(prompts), seed))
    return [(p[0], seed) for p in prompts]

  def run(self, state, sampling, params=None):
    assert sampling.temperature_B.shape[0] == len(state)  # sampling settings per wave
    return state

  def outputs(self, state):
    from spade_jax.engine.generate import GenerateOutput

    n = len(state)
    return GenerateOutput(
      tokens=[[first, seed] for first, seed in state],
      logprobs=[[-1.0, -1.0]] * n,
      loss_mask=[[1, 1]] * n,
      finished=[False] * n,
      stop_reason=["length"] * n,
    )


class _Tok:
  eos_ids = (0,)

  def apply_chat_template(self, conversation):
    return [conversation[0]["content"], 1, 2]


@pytest.mark.parametrize("wave", [0, 2, 3, 7])
def test_designer_samples_in_waves(tmp_path, wave):
  from spade_jax.envs.sandbox.validate import ValidatorConfig
  from spade_jax.spade.designer import Designer, DesignerConfig

  engine = _Engine()
  designer = Designer(
    engine, _Tok(), DesignerConfig(wave_size=wave), ValidatorConfig(), tmp_path, max_context=64
  )
  convs = [[{"role": "user", "content": 100 + i}] for i in range(7)]
  kw = dict(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=8, params=None)
  prompts, out = designer._sample(convs, seed=11, **kw)
  size = wave or 7
  sizes = [min(size, 7 - at) for at in range(0, 7, size)]
  assert engine.waves == [(n, 11 if w == 0 else derive_seed(11, w)) for w, n in enumerate(sizes)]
  assert [t[0] for t in out.tokens] == [100 + i for i in range(7)]  # in prompt order
  assert len(out.stop_reason) == len(out.finished) == 7 and len(prompts) == 7
