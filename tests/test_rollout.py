"""On-device multi-turn rollout: parity with the host loop, oracle solves, caps, determinism,
one compilation for any program mix, no host transfer inside the call.

Reference: ``host_rollout.play`` over the library's Python twins (trusted ``LocalEnvBatch``),
each reset with a `DrawReplay` of the interpreter's recorded draws, so both sides play the
same instances; the same tiny random model drives both (the host through ``Engine``). Turns
are partly scripted by `ScriptedPolicy` (the same processor on both sides): a right answer, a
wrong answer, or a free turn the model samples, so every feedback branch and end reason runs.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.engine.generate import Engine
from spade_jax.envs.ir import text
from spade_jax.envs.ir.assembly import assemble
from spade_jax.envs.ir.draws import DrawReplay, substitute_random
from spade_jax.envs.ir.program import TPL_HINT
from spade_jax.envs.library import FAMILIES
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rollout import host as host_rollout
from spade_jax.rollout.chat import ChatFraming
from spade_jax.rollout.device import TRACES, DeviceRollout, episode_keys, rollout
from spade_jax.rollout.types import (
  CONTEXT,
  END_REASONS,
  ENV_TRUNCATED,
  FAULT,
  TERMINATED,
  TURN_CAP,
  RolloutSpec,
  ScriptedPolicy,
)
from spade_jax.tokenizer import load_tokenizer

SYSTEM = "You are playing a game. Answer in \\boxed{}."
PREAMBLE = "Solve the task below.\n\n"
CFG = host_rollout.RolloutConfig(max_turns=3, max_new_tokens=12, max_context=512, greedy=True)
FAMS = list(FAMILIES.values())
B = 2 * len(FAMS)  # every device call uses this batch size: one compilation for the file
TURNS, WIDTH = 3, 96


@pytest.fixture(scope="module")
def setup():
  tok = load_tokenizer(tiny_tokenizer_dir())
  framing = ChatFraming.from_tokenizer(tok, system=SYSTEM)
  mcfg = TransformerConfig(
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
  model = Transformer(mcfg, rngs=nnx.Rngs(0))
  dev = DeviceRollout(
    model,
    tok,
    framing,
    CFG,
    preamble=PREAMBLE,
    script_turns=TURNS,
    script_width=WIDTH,
    feed_chunk=16,
  )
  # the parity batch: level 1 of every family, unhinted then hinted on the same seeds
  fams = FAMS + FAMS
  programs = [f.build(tok, **f.levels[1]) for f in fams]
  seeds = [1000 + 7 * (i % len(FAMS)) for i in range(B)]
  hints = [i >= len(FAMS) for i in range(B)]
  out = dev(programs, seeds, hints).to_host()  # free greedy play: records the draws
  twins = [_twin(f, f.levels[1], out.env_state, i) for i, f in enumerate(fams)]
  scripts = [_script(tok, twin, (i + i // len(FAMS)) % 3) for i, twin in enumerate(twins)]
  policy = ScriptedPolicy(framing.turn_end, TURNS, WIDTH, scripts=scripts)
  return dict(
    tok=tok,
    framing=framing,
    model=model,
    dev=dev,
    engine=Engine(model, processor=policy),
    fams=fams,
    programs=programs,
    seeds=seeds,
    hints=hints,
    state=out.env_state,
    scripts=scripts,
  )


class ReplayTwin:
  """A library twin whose reset draws exactly the interpreter's recorded values."""

  def __init__(self, family, level, draws):
    self.family, self.env, self.draws = family, family.twin(**level), draws

  def reset(self, seed=None):
    replay = DrawReplay(self.draws)
    with substitute_random(self.family.twin_module, replay):
      out = self.env.reset(seed)
    assert replay.done()
    return out

  def step(self, action):
    return self.env.step(action)


def _twin(family, level, state, i):
  twin = ReplayTwin(family, level, state.draws[i, : state.n_draws[i]])
  twin.reset()
  return twin


def _script(tok, twin, kind):
  """Per-turn answers: 0 right at once; 1 wrong, free, right; 2 free, wrong, free."""
  ints = twin.env.answer if isinstance(twin.env.answer, list) else [twin.env.answer]
  right = tok.encode(f"It is {twin.env.solution()}")
  wrong = tok.encode("\\boxed{" + ", ".join(map(str, ints[:-1] + [ints[-1] + 1])) + "}")
  return ((tuple(right),), (tuple(wrong), (), tuple(right)), ((), tuple(wrong), ()))[kind]


def _host(s, cfg, seed=0):
  """The host loop over replaying twins with the same first messages and scripts."""
  tok, state = s["tok"], s["state"]

  def first(i, obs):
    if not s["hints"][i]:
      return PREAMBLE + obs
    items = text.template_items(s["programs"][i], TPL_HINT, tok)
    lists = [state.lists[i][k][: state.list_len[i][k]] for k in range(state.lists.shape[1])]
    return PREAMBLE + obs + "\n\nHINT: " + text.items_text(items, state.regs[i], lists)

  envs = [_twin(f, f.levels[1], state, i) for i, f in enumerate(s["fams"])]
  batch = host_rollout.LocalEnvBatch(envs)
  return host_rollout.play(s["engine"], tok, s["framing"], batch, s["seeds"], first, cfg, seed=seed)


def _assert_same(dev, host, reasons, logprob_atol=1e-5):
  assert dev.tokens == host.tokens
  assert dev.loss_mask == host.loss_mask
  for a, b in zip(dev.logprobs, host.logprobs):
    np.testing.assert_allclose(a, b, atol=logprob_atol, rtol=0)
  for name in ("reward", "turns", "terminated", "truncated", "crashed"):
    np.testing.assert_array_equal(getattr(dev, name), getattr(host, name), err_msg=name)
  for d, h, r in zip(dev.transcripts, host.transcripts, reasons):
    if r == CONTEXT and len(h) == len(d) + 1 and h[-1]["role"] == "user":
      h = h[:-1]  # the host logs the feedback that found no room in the cache; tokens lack it
    assert d == h


@pytest.mark.parametrize("chunked", [False, True])
def test_greedy_parity_with_host_loop(setup, chunked):
  """Turns fed as they end (not in the host's lockstep); with ``chunked`` the prompt and the
  feedback also go through chunked forwards: the same conversations either way."""
  s = setup
  out = s["dev"](s["programs"], s["seeds"], s["hints"], scripts=s["scripts"], chunked=chunked)
  dev = out.episodes(s["tok"], s["framing"])
  host = _host(s, CFG)
  _assert_same(dev, host, np.asarray(out.end_reason_B))
  reasons = {END_REASONS[int(r)] for r in np.asarray(out.end_reason_B)}
  assert {"terminated", "env_truncated", "turn_cap"} <= reasons, reasons
  assert dev.solved.sum() == int(np.sum(np.asarray(out.end_reason_B) == TERMINATED)) > 0
  assert not dev.crashed.any() and set(dev.reward.tolist()) <= {0.0, 1.0}
  # a prompt is system + preamble + observation (+ HINT line): the chat template's tokens
  first = dev.transcripts[len(FAMS)][0]["content"]
  assert first.startswith(PREAMBLE) and "\n\nHINT: " in first
  msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first}]
  prompt = s["tok"].apply_chat_template(msgs)
  assert dev.tokens[len(FAMS)][: len(prompt)] == prompt
  # the loss mask covers exactly the sampled assistant turns: one run of 1s per turn
  for i in range(B):
    runs = np.diff(np.concatenate([[0], dev.loss_mask[i], [0]]))
    assert (runs == 1).sum() == dev.turns[i] == len(dev.transcripts[i]) // 2
  traj, ref = out.to_trajectories(group_id=0), host.to_trajectories(group_id=0)
  np.testing.assert_array_equal(traj.tokens_BT, ref.tokens_BT)
  np.testing.assert_array_equal(traj.loss_mask_BT, ref.loss_mask_BT)
  np.testing.assert_allclose(traj.rollout_logprobs_BT, ref.rollout_logprobs_BT, atol=1e-5)
  np.testing.assert_array_equal(traj.turns_B, ref.turns_B)
  np.testing.assert_array_equal(traj.rewards_B, ref.rewards_B)


def test_sampled_parity_in_host_schedule(setup):
  """With ``sync_turns`` the decode steps, slots and keys are the host loop's, so sampled
  (temperature 1) episodes match too; a budget that fills the cache ends episodes the same way."""
  s = setup
  for cfg, seed in (
    (host_rollout.RolloutConfig(max_turns=3, max_new_tokens=12, max_context=512), 5),
    (host_rollout.RolloutConfig(max_turns=9, max_new_tokens=40, max_context=512, greedy=True), 0),
  ):
    out = s["dev"](
      s["programs"],
      s["seeds"],
      s["hints"],
      cfg=cfg,
      seed=seed,
      scripts=s["scripts"],
      sync_turns=True,
      chunked=False,
    )
    # same cache layout as the host engine's: its prompt bucket is our prompt_len
    spec = s["dev"].spec
    assert s["engine"].bucket(int(np.asarray(out.prompt_len_B).max())) == spec.prompt_len
    host = _host(s, cfg, seed=seed)
    _assert_same(out.episodes(s["tok"], s["framing"]), host, np.asarray(out.end_reason_B))
    if cfg.max_turns == 9:
      reasons = np.asarray(out.end_reason_B)
      assert (reasons == CONTEXT).any() and (reasons == TERMINATED).any()
      assert int(np.asarray(out.length_B).max()) <= cfg.max_context


def test_oracle_solves_every_library_environment(setup):
  s = setup
  tok, dev = s["tok"], s["dev"]
  cfg = host_rollout.RolloutConfig(max_turns=3, max_new_tokens=WIDTH + 1, max_context=512)
  jobs = [(f, lvl) for f in FAMS for lvl in f.levels]
  jobs += jobs[: -len(jobs) % B]  # two full batches
  for start in range(0, len(jobs), B):
    chunk = jobs[start : start + B]
    programs = [f.build(tok, **lvl) for f, lvl in chunk]
    hints = [k % 2 == 1 for k in range(B)]
    out = dev(programs, list(range(start, start + B)), hints, cfg=cfg, oracle=True)
    h = out.to_host()
    names = [f.name for f, _ in chunk]
    assert h.end_reason_B.tolist() == [TERMINATED] * B, list(zip(names, h.end_reason_B))
    assert h.reward_B.tolist() == [1.0] * B and h.turns_B.tolist() == [1] * B
    assert np.asarray(out.solved_B).all() and not h.fault_B.any()
    res = out.episodes(tok, s["framing"])
    for i, (f, lvl) in enumerate(chunk):
      twin = _twin(f, lvl, h.env_state, i)
      assert res.transcripts[i][1]["content"] == twin.env.solution(), f.name
      assert sum(res.loss_mask[i]) == len(tok.encode(twin.env.solution())) + 1


def test_same_seeds_same_episodes_and_logprobs_match_a_forward(setup):
  s = setup
  cfg = host_rollout.RolloutConfig(max_turns=3, max_new_tokens=12, max_context=512)
  run = lambda seed, seeds: s["dev"](s["programs"], seeds, s["hints"], cfg=cfg, seed=seed).to_host()
  a, b, c = run(3, s["seeds"]), run(3, s["seeds"]), run(4, s["seeds"])
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)
  assert not np.array_equal(a.tokens_BT, c.tokens_BT)  # another sampling key
  d = run(3, [x + 1 for x in s["seeds"]])  # other episode seeds: other instances
  assert not np.array_equal(a.env_state.draws, d.env_state.draws)
  # recorded log-probs are log_softmax(logits / T) of a full forward at the sampled tokens
  for i in (0, B - 1):
    n = int(a.length_B[i])
    toks, mask, lps = a.tokens_BT[i, :n], a.loss_mask_BT[i, :n], a.logprobs_BT[i, :n]
    ref = np.asarray(jax.nn.log_softmax(s["model"](toks[None])[0], -1))
    at = np.flatnonzero(mask)
    np.testing.assert_allclose(lps[at], ref[at - 1, toks[at]], atol=1e-4)
    assert not mask[: int(a.prompt_len_B[i])].any()


FAULTY = (
  # division by zero in reset: the episode never starts
  'turns 3\nreset\nrand r0 0 0\ndiv r1 5 r0\nstep\nanswer r0\nobs "Say " r0\ncase 1 0 go "x"\n',
  # division by zero on the first step
  'turns 3\nreset\nrand r0 1 3\nstep\ndiv r1 guess 0\nanswer r0\nobs "Pick " r0\ncase 1 0 go "x"\n',
)


def test_new_program_mix_no_recompile_no_transfer_and_faults(setup):
  s = setup
  tok, dev = s["tok"], s["dev"]
  TRACES.clear()
  mix = [f.build(tok, **f.levels[(i % 2) * 2]) for i, f in enumerate(FAMS[::-1] + FAMS)]
  mix[:2] = [assemble(src, tok) for src in FAULTY]
  batch = jax.device_put(dev.batch(mix, list(range(50, 50 + B)), [i % 2 == 0 for i in range(B)]))
  params, key = jax.device_put((dev.params, jax.random.PRNGKey(9)))
  with jax.transfer_guard("disallow"):
    out = rollout(dev.graphdef, params, batch, key, dev.spec)
    out.tokens_BT.block_until_ready()
  assert TRACES["rollout"] == 0  # the first batch's compilation served a new program mix
  h = out.to_host()
  assert h.end_reason_B[:2].tolist() == [FAULT, FAULT] and h.turns_B[:2].tolist() == [0, 1]
  assert np.asarray(out.crashed_B)[:2].all() and not np.asarray(out.crashed_B)[2:].any()
  res = out.episodes(tok, s["framing"])
  assert "division by zero" in res.errors[0] and res.crashed[:2].all()
  assert sum(res.loss_mask[0]) == 0 and len(res.transcripts[1]) == 2
  assert set(h.end_reason_B[2:].tolist()) <= {ENV_TRUNCATED, TURN_CAP, TERMINATED}


def test_spec_and_batch_errors(setup):
  s = setup
  with pytest.raises(ValueError, match="max_context"):
    RolloutSpec.make(s["tok"], s["framing"], max_context=200, prompt_len=256)
  with pytest.raises(ValueError, match="seeds"):
    episode_keys([-1])
  with pytest.raises(ValueError, match="hint flags"):
    s["dev"].batch(s["programs"], s["seeds"], [False])
  with pytest.raises(ValueError, match="script_width"):
    s["dev"].batch(s["programs"][:1], [0], [False], scripts=[[[5] * (WIDTH + 1)]])
  np.testing.assert_array_equal(
    episode_keys([0, 7, 2**32 - 1]),
    np.stack([jax.random.PRNGKey(x) for x in (0, 7, 2**32 - 1)]),
  )
