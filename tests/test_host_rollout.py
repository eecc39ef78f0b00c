"""Host-loop multi-turn rollout: framing, masks, log-probs, turn limits, crashes."""

import re

import jax
import numpy as np
import pytest
from flax import nnx
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.engine.generate import Engine
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rollout import host as host_rollout
from spade_jax.rollout.chat import ChatFraming
from spade_jax.tokenizer import load_tokenizer


class GuessEnv:
  """Guess-the-number with higher/lower feedback (trusted test env)."""

  def __init__(self, max_turns=3, crash_on_step=False):
    self.max_turns, self.crash_on_step = max_turns, crash_on_step
    self.reset()

  def reset(self, seed=None):
    import random

    self.target = random.Random(seed).randint(1, 9)
    self.turn = 0
    return f"Guess my number from 1 to 9 (seed {seed}).", {}

  def step(self, action):
    if self.crash_on_step:
      raise RuntimeError("boom")
    self.turn += 1
    m = re.findall(r"\\boxed\{(-?\d+)\}", action)
    if m and int(m[-1]) == self.target:
      return "Correct!", 1.0, True, False, {}
    msg = "No boxed answer." if not m else ("Too high." if int(m[-1]) > self.target else "Too low.")
    return msg, 0.0, False, self.turn >= self.max_turns, {}


class AlwaysRight(GuessEnv):
  def step(self, action):
    return "Correct!", 1.0, True, False, {}


@pytest.fixture(scope="module")
def setup():
  tok = load_tokenizer(tiny_tokenizer_dir())
  cfg = TransformerConfig(
    vocab_size=tok.vocab_size,
    embed_dim=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    mlp_dim=64,
    qk_norm=True,
    model_type="qwen3",
  )
  model = Transformer(cfg, rngs=nnx.Rngs(0))
  return tok, model, Engine(model), ChatFraming.from_tokenizer(tok)


RCFG = host_rollout.RolloutConfig(max_turns=4, max_new_tokens=12, max_context=256, temperature=1.0)


def test_multi_turn_structure_and_logprobs(setup):
  tok, model, engine, framing = setup
  envs = host_rollout.LocalEnvBatch([GuessEnv(max_turns=3) for _ in range(4)])
  res = host_rollout.play(
    engine, tok, framing, envs, [1, 2, 3, 4], lambda i, obs: f"Play: {obs}", RCFG, seed=0
  )
  assert res.turns.tolist() == [3, 3, 3, 3]  # random model never answers: env truncates at 3
  assert res.truncated.all() and not res.terminated.any() and not res.crashed.any()
  assert (res.reward == 0).all()
  for i in range(4):
    toks, mask, lps = map(np.asarray, (res.tokens[i], res.loss_mask[i], res.logprobs[i]))
    prompt = framing.first_prompt(tok, f"Play: Guess my number from 1 to 9 (seed {i + 1}).")
    assert toks[: len(prompt)].tolist() == prompt and not mask[: len(prompt)].any()
    # every feedback message appears verbatim as masked (forced) tokens
    fb_texts = [m["content"] for m in res.transcripts[i][2::2]]
    assert len(fb_texts) == 2
    text = tok.decode(toks[mask == 0].tolist())
    for fb in fb_texts:
      assert f"<|im_start|>user\n{fb}<|im_end|>\n<|im_start|>assistant\n" in text
    # recorded log-probs are log_softmax(logits / T) of a full forward at the sampled tokens
    logits = np.asarray(model(toks[None]))[0]
    ref = np.asarray(jax.nn.log_softmax(logits / RCFG.temperature, -1))
    sampled = np.flatnonzero(mask)
    np.testing.assert_allclose(lps[sampled], ref[sampled - 1, toks[sampled]], atol=1e-4)
  traj = res.to_trajectories(group_id=[0, 0, 1, 1])
  assert traj.loss_mask_BT.sum() == sum(sum(m) for m in res.loss_mask)
  assert traj.turns_B.tolist() == [3, 3, 3, 3]


def test_same_seed_same_episodes_and_turn_cap(setup):
  tok, _, engine, framing = setup
  runs = []
  for _ in range(2):
    envs = host_rollout.LocalEnvBatch([GuessEnv(max_turns=99) for _ in range(2)])
    runs.append(host_rollout.play(engine, tok, framing, envs, [5, 6], lambda i, o: o, RCFG, seed=3))
  assert runs[0].tokens == runs[1].tokens
  assert runs[0].turns.tolist() == [RCFG.max_turns] * 2 and runs[0].truncated.all()


def test_terminal_reward_and_crash(setup):
  tok, _, engine, framing = setup
  envs = host_rollout.LocalEnvBatch([AlwaysRight(), GuessEnv(crash_on_step=True), AlwaysRight()])
  res = host_rollout.play(engine, tok, framing, envs, [1, 2, 3], lambda i, o: o, RCFG)
  assert res.terminated.tolist() == [True, False, True]
  assert res.reward.tolist() == [1.0, 0.0, 1.0] and res.solved.tolist() == [True, False, True]
  assert res.crashed.tolist() == [False, True, False] and "boom" in res.errors[1]
  assert res.turns.tolist() == [1, 1, 1]


class Recorder(GuessEnv):
  """Records the action text each step receives."""

  def step(self, action):
    self.actions = [*getattr(self, "actions", []), action]
    return super().step(action)


def test_step_gets_only_the_turns_own_text(setup):
  """Regression: the feedback fed after turn k must not leak into turn k+1's action text."""
  tok, _, engine, framing = setup
  envs = [Recorder(max_turns=3) for _ in range(2)]
  res = host_rollout.play(
    engine, tok, framing, host_rollout.LocalEnvBatch(envs), [1, 2], lambda i, o: o, RCFG
  )
  for env, toks, mask in zip(envs, res.tokens, res.loss_mask):
    runs, cur = [], []
    for t, m in zip(toks, mask):
      if m:
        cur.append(t)
      elif cur:
        runs, cur = [*runs, cur], []
    runs += [cur] if cur else []
    want = [tok.decode(r[:-1] if r[-1] in tok.eos_ids else r) for r in runs]
    assert len(env.actions) == 3 and env.actions == want
