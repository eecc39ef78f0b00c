"""Rollout data types: first-message templates, output conversions (packing, transcripts,
Trajectories) and the scripted policy."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.engine.kv_cache import DecodeCache
from spade_jax.envs.ir import text
from spade_jax.envs.ir.assembly import assemble
from spade_jax.envs.ir.program import TPL_HINT, TPL_OBS
from spade_jax.envs.library import FAMILIES
from spade_jax.rollout.chat import ChatFraming
from spade_jax.rollout.types import (
  HINT_SEPARATOR,
  TERMINATED,
  TURN_CAP,
  RolloutOutput,
  RolloutSpec,
  ScriptedPolicy,
  first_templates,
)
from spade_jax.tokenizer import load_tokenizer


def _conversation(tok, framing):
  """A two-turn conversation as the rollout lays it out: (tokens, mask) and its messages."""
  user, answer, fb, answer2 = "Find x.", "I say \\boxed{4}", "Too low.", "maybe 7"
  prompt = framing.first_prompt(tok, user)
  a1 = tok.encode(answer) + [framing.turn_end]  # ended by the stop token
  f1 = framing.feedback(tok, fb)
  a2 = tok.encode(answer2)  # cut by the turn budget: the next feedback would close it
  tokens = prompt + a1 + f1 + a2
  mask = [0] * len(prompt) + [1] * len(a1) + [0] * len(f1) + [1] * len(a2)
  msgs = [
    {"role": "user", "content": user},
    {"role": "assistant", "content": answer},
    {"role": "user", "content": fb},
    {"role": "assistant", "content": answer2},
  ]
  return tokens, mask, len(prompt), msgs


def test_pack_episodes_and_trajectories():
  tok = load_tokenizer(tiny_tokenizer_dir())
  framing = ChatFraming.from_tokenizer(tok)
  tokens, mask, plen, msgs = _conversation(tok, framing)
  S, n = len(tokens) + 9, len(tokens)
  # scatter the conversation over the cache slots of sequence 0 with invalid holes in between
  slots = np.sort(np.random.default_rng(0).choice(S, n, replace=False))
  tok_BS, mask_BS, lp_BS, valid_BS = (
    np.zeros((2, S), d) for d in (np.int32, bool, np.float32, bool)
  )
  tok_BS[0, slots], mask_BS[0, slots], valid_BS[0, slots] = tokens, mask, True
  lp_BS[0, slots] = np.where(mask, -np.arange(1, n + 1, dtype=np.float32), 0)
  tok_BS[1, :plen], valid_BS[1, :plen] = tokens[:plen], True  # an episode that never started

  class State:  # the fields `pack` reads
    cache = DecodeCache(k=(), v=(), valid_BS=jnp.asarray(valid_BS), index=jnp.int32(S))
    tokens_BS, loss_mask_BS, logprobs_BS = map(jnp.asarray, (tok_BS, mask_BS, lp_BS))
    step = jnp.int32(S)

  class Ep:
    reward_B = jnp.array([1.0, 0.0])
    turns_B = jnp.array([2, 0])
    terminated_B = jnp.array([True, False])
    truncated_B = jnp.array([False, True])
    reason_B = jnp.array([TERMINATED, TURN_CAP])
    fault_B = jnp.array([0, 0])
    env = None

  out = RolloutOutput.pack(State, Ep, jnp.array([plen, plen]))
  h = out.to_host()
  assert h.length_B.tolist() == [n, plen]
  assert h.tokens_BT[0, :n].tolist() == tokens and not h.tokens_BT[0, n:].any()
  res = out.episodes(tok, framing)
  assert res.transcripts[0] == msgs and res.transcripts[1] == msgs[:1]
  assert res.loss_mask[0] == mask and res.tokens[1] == tokens[:plen]
  assert res.solved.tolist() == [True, False] and res.turns.tolist() == [2, 0]
  traj = out.to_trajectories(group_id=[3, 4], advantages=[0.5, -0.5])
  assert traj.seq_len == n and traj.tokens_BT[0].tolist() == tokens
  assert traj.loss_mask_BT.sum() == sum(mask) and traj.loss_mask_BT[1].sum() == 0
  np.testing.assert_array_equal(traj.rollout_logprobs_BT[0], h.logprobs_BT[0, :n])
  assert traj.group_id_B.tolist() == [3, 4] and traj.valid_B.all()
  assert traj.rewards_B.tolist() == [1.0, 0.0] and traj.advantages_B.tolist() == [0.5, -0.5]
  assert out.to_trajectories(group_id=0, seq_len=n + 5).seq_len == n + 5


def test_scripted_policy_forces_each_turn_then_frees():
  stop = 2
  pol = ScriptedPolicy(stop, turns=2, width=4, scripts=[[[7, 8], []], [[9]]])
  st = pol.init_state(2)
  logits = jnp.zeros((2, 16))
  allowed = lambda st: [np.flatnonzero(np.isfinite(row)).tolist() for row in pol.mask(st, logits)]
  yes, no = jnp.array([True, True]), jnp.array([False, False])
  assert allowed(st) == [[7], [9]]
  st = pol.update(st, jnp.array([7, 9]), yes)
  assert allowed(st) == [[8], [stop]]
  st = pol.update(st, jnp.array([8, stop]), yes)
  assert allowed(st)[0] == [stop]
  st = pol.update(st, jnp.array([stop, 5]), jnp.array([True, False]))  # seq 1: feedback starts
  assert allowed(st)[1] == list(range(16))  # seq 1, turn 1: no script -> free
  for _ in range(3):  # forced feedback tokens: one turn change only
    st = pol.update(st, jnp.array([5, 5]), no)
  assert st["turn"].tolist() == [1, 1]
  assert allowed(st) == [list(range(16))] * 2  # seq 0 turn 1 is free; beyond `turns` too
  assert hash(pol) == hash(ScriptedPolicy(stop, 2, 4, scripts=(((7, 8), ()), ((9,),))))


@pytest.mark.parametrize("preamble", ["", "Play well.\n\n"])
def test_first_templates_render_like_encode(preamble):
  """Both first-message variants render to ``encode`` of the host's string, for any values."""
  tok = load_tokenizer(tiny_tokenizer_dir())
  spec = RolloutSpec.make(tok, ChatFraming.from_tokenizer(tok), max_context=512, preamble=preamble)
  for name in ("sorting", "linear", "mastermind"):
    program = FAMILIES[name].build(tok)
    first = first_templates(program, tok, spec)
    obs = text.template_items(program, TPL_OBS, tok)
    hint = text.template_items(program, TPL_HINT, tok)
    regs = {i: v for i, v in enumerate(range(-7, 30, 3))}
    lists = {i: [5, -12, 0][: i + 1] for i in range(4)}
    want_plain = preamble + text.items_text(obs, regs, lists)
    want_hint = want_plain + HINT_SEPARATOR + text.items_text(hint, regs, lists)
    consts = {k: np.asarray(getattr(program, k)) for k in ("digit_ids", "sep_ids", "sep_len")}
    n_obs = spec.program_cfg.n_obs  # one plain and one hinted template per observation template
    for v, want in ((0, want_plain), (n_obs, want_hint)):
      tpl = {
        "ids": first.tpl_ids[v],
        "len": first.tpl_len[v],
        "slots": first.tpl_slots[v],
        "tail": first.tpl_tail[v],
        "tail_len": first.tpl_tail_len[v],
      }
      assert text.render_host(tpl, regs, lists, consts) == tok.encode(want), (name, v)


def test_program_without_hint_gets_no_hint_line():
  tok = load_tokenizer(tiny_tokenizer_dir())
  spec = RolloutSpec.make(tok, ChatFraming.from_tokenizer(tok), max_context=512)
  src = 'turns 2\nreset\nrand r0 1 9\nstep\nanswer r0\nobs "Say " r0 "."\ncase 1 0 go "x"\n'
  first = first_templates(assemble(src, tok), tok, spec)
  n_obs = spec.program_cfg.n_obs
  np.testing.assert_array_equal(first.tpl_ids[0], first.tpl_ids[n_obs])
  np.testing.assert_array_equal(first.tpl_slots[0], first.tpl_slots[n_obs])
