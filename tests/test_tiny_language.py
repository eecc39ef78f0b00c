"""The designer language: host encode/decode, the on-device assembler (parity with the host
assembler, rejection reasons, dummy replacement), first-message templates, the interpreter."""

from __future__ import annotations

import dataclasses
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.envs.ir.assembly import AssemblyError, assemble
from spade_jax.envs.ir.checks import CHECKS
from spade_jax.envs.ir.interpreter import ProgramEnv
from spade_jax.envs.ir.program import OP_NAMES, Action, EnvProgram, stack_programs
from spade_jax.envs.library import FAMILIES
from spade_jax.rollout.chat import ChatFraming
from spade_jax.rollout.types import RolloutSpec, first_templates
from spade_jax.tiny import grammar
from spade_jax.tiny.language import (
  INFEASIBLE,
  REASONS,
  TINY_CONFIG,
  Language,
  assemble_and_validate,
  assemble_tokens,
  dummy_program,
  feasible,
  first_templates_device,
  tiny_library,
)
from spade_jax.tiny.tokenizer import BOXED, load_tiny_tokenizer

CFG = TINY_CONFIG


@pytest.fixture(scope="module")
def setup():
  tok = load_tiny_tokenizer()
  lang = Language.make(tok)
  lib = tiny_library(lang)
  width = max(len(t) for *_, t in lib) + 4
  tokens = np.zeros((len(lib), width), np.int32)
  for i, (*_, t) in enumerate(lib):
    tokens[i, : len(t)] = t
  programs, ok, reason = jax.device_get(assemble_tokens(lang, tokens))
  hosts = [assemble(lang.decode(t), tok, CFG) for *_, t in lib]
  return tok, lang, lib, programs, ok, reason, hosts


def _row(programs, i) -> EnvProgram:
  return jax.tree.map(lambda x: np.asarray(x)[i], programs)


def _equal(a: EnvProgram, b: EnvProgram) -> list[str]:
  return [
    f.name
    for f in dataclasses.fields(EnvProgram)
    if not np.array_equal(np.asarray(getattr(a, f.name)), np.asarray(getattr(b, f.name)))
  ]


def test_every_library_program_assembles_on_device_like_the_host(setup):
  tok, lang, lib, programs, ok, reason, hosts = setup
  n_levels = sum(len(f.levels) for f in FAMILIES.values())
  fitted = {(name, level) for name, level, _ in lib}
  assert len(lib) == n_levels, (
    f"not in the tiny library: {[k for k in FAMILIES if k not in fitted]}"
  )
  assert ok.all() and (reason == 0).all()
  for i, (name, level, tokens) in enumerate(lib):
    assert _equal(_row(programs, i), hosts[i]) == [], (name, level)
    assert lang.encode(lang.decode(tokens)) == tokens
    assert len(tokens) <= lang.max_tokens and tokens[-1] == lang.end_id


_VALID = """turns 3
table t0 2 3 5
reset
choice r0 t0
rand r1 -4 9
push l0 r1
step
eq r2 guess r0
answer r0
obs "The list is " l0 " and " r0 "."
hint "Try again."
case r2 1000 stop "Correct!"
case 1 0 go "Too high."
"""


@pytest.fixture(scope="module")
def bad_streams(setup):
  """(name, tokens, expected reason) of corrupted / ill-formed streams, built with the host
  grammar check of `Language.encode` switched off: they are what a model could emit."""
  lang = setup[1]
  good = lang.encode(_VALID)
  at = good.index(lang.op_ids[OP_NAMES.index("choice") - 1]) + 1  # choice's destination

  def sub(old, new):
    with mock.patch.object(grammar, "check_tokens", lambda lang, t: (0, 0)):
      return lang.encode(_VALID.replace(old, new, 1))

  syntax, reg = "token not allowed here (grammar)", "scalar register read before written"
  reg += ", or written out of order"
  many = 'case 1 0 go "Too high."\n' * 6 + "case 1 0"
  return [
    ("valid", good, "ok"),
    ("no end", good[:-1], "program has no end token"),
    ("phrase as operand", good[:at] + [lang.phrase_ids[0]] + good[at + 1 :], syntax),
    ("id beyond the vocabulary", good[:at] + [lang.vocab_size + 3] + good[at + 1 :], syntax),
    ("read unwritten register", sub("rand r1 -4 9", "rand r1 -4 r5"), reg),
    ("register written out of order", sub("choice r0 t0", "choice r4 t0"), reg),
    ("read unwritten list", sub("push l0 r1", "copy l0 l1"), REASONS[3]),
    ("table not defined", sub("table t0", "table t1"), REASONS[4]),
    ("too many instructions", sub("push l0 r1", "push l0 r1\n" + "set r2 1\n" * 26), REASONS[6]),
    ("too many cases", sub("case 1 0", many), "too many cases"),
    ("template too long", sub('"Try again."', '"Try again." ' + '"1"' * 24), "template too long"),
    ("turns out of range", sub("turns 3", "turns 17"), syntax),
    ("reward out of range", sub("1000 stop", "1001 stop"), syntax),
    ("empty rand range", sub("rand r1 -4 9", "rand r1 9 -4"), "check: " + CHECKS[5]),
  ]


def test_ill_formed_streams_are_rejected_with_the_reason(setup, bad_streams):
  tok, lang = setup[0], setup[1]
  width = max(len(t) for _, t, _ in bad_streams) + 2
  tokens = np.zeros((len(bad_streams), width), np.int32)
  for i, (_, t, _) in enumerate(bad_streams):
    tokens[i, : len(t)] = t
  programs, ok, reason = jax.device_get(assemble_tokens(lang, tokens))
  dummy = jax.device_get(dummy_program(lang))
  assert _equal(dummy, assemble(lang.decode(lang.dummy_tokens), tok, CFG)) == []
  for i, (name, toks, want) in enumerate(bad_streams):
    assert REASONS[reason[i]] == want, name
    assert bool(ok[i]) == (want == "ok"), name
    if want == "ok":
      assert _equal(_row(programs, i), assemble(lang.decode(toks), tok, CFG)) == []
    else:
      assert _equal(_row(programs, i), dummy) == [], name
  # the host side reports the same problems with a line number
  with pytest.raises(ValueError, match="line 4: scalar register"):
    lang.encode(_VALID.replace("choice r0 t0", "choice r4 t0"))
  with pytest.raises(ValueError, match="line 12: token not allowed"):
    lang.encode(_VALID.replace("1000 stop", "1001 stop"))
  with pytest.raises(ValueError, match="no phrase"):
    lang.encode(_VALID.replace('"Too high."', '"Too highly!"'))
  with pytest.raises(AssemblyError, match="rand range is empty"):
    assemble(_VALID.replace("rand r1 -4 9", "rand r1 9 -4"), tok, CFG)
  with pytest.raises(ValueError, match="no end token"):
    lang.decode(bad_streams[1][1])
  assert lang.decode(bad_streams[1][1], strict=False).startswith("turns 3\n")


def test_first_templates_device_equals_host(setup):
  tok, lang, lib, programs, ok, _, hosts = setup
  framing = ChatFraming.from_tokenizer(tok)
  fn = jax.jit(first_templates_device, static_argnums=(0, 2), static_argnames="preamble_ids")
  for preamble in ("", "You are playing a game.\n\n"):
    spec = RolloutSpec.make(
      tok, framing, max_context=512, program_cfg=CFG, prompt_len=256, preamble=preamble
    )
    pre = tuple(tok.encode(preamble))
    got = jax.device_get(fn(lang, programs, spec, preamble_ids=pre))
    # without a spec (preamble ids positional) the sizes are what RolloutSpec.make computes
    alone = jax.device_get(fn(lang, programs, pre))
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, alone, got)))
    for i, host in enumerate(hosts):
      want = first_templates(host, tok, spec)
      for f in dataclasses.fields(want):
        a, b = np.asarray(getattr(got, f.name))[i], np.asarray(getattr(want, f.name))
        assert np.array_equal(a, b), (lib[i][:2], f.name, preamble)


def test_assembled_programs_run_in_the_interpreter(setup):
  """Device-assembled and host-assembled programs give the same first observation; the
  declared solution solves each; wrong answers run every program to truncation fault-free."""
  tok, lang, lib, programs, ok, _, hosts = setup
  env = ProgramEnv(CFG)
  keys = jax.random.split(jax.random.PRNGKey(0), len(lib))

  @jax.jit
  def play(keys, progs):
    obs, st = jax.vmap(env.reset)(keys, progs)
    sol = jax.vmap(env.solution_action)(st, progs)
    _, _, r_sol, term, *_ = jax.vmap(env.transition)(keys, st, sol, progs)
    wrong = Action(sol.found, sol.count, sol.values.at[:, 0].add(1))

    def step(st, _):
      _, st, r, *_ = jax.vmap(env.transition)(keys, st, wrong, progs)
      return st, r

    st, _ = jax.lax.scan(step, st, None, CFG.max_turns_cap)
    return obs, r_sol, term, st

  host = stack_programs(hosts)
  obs_d, r_d, term_d, st_d = jax.device_get(play(keys, programs))
  obs_h, *_ = jax.device_get(play(keys, host))
  assert np.array_equal(obs_d.ids, obs_h.ids) and np.array_equal(obs_d.length, obs_h.length)
  assert (r_d == 1.0).all() and term_d.all()
  assert (st_d.fault == 0).all() and (st_d.terminated | st_d.truncated).all()
  text = tok.decode(obs_d.ids[0][: obs_d.length[0]])
  assert text.startswith("Compute ") and text.endswith("Answer with \\boxed{N}.")


def test_answer_hints_show_each_library_programs_answer(setup):
  """``hints="answer"``: the same library, each hint rendering ``The answer is <answer>.``
  where ``<answer>`` is the declared solution's text (scalar or list), for every program."""
  tok, lang, lib = setup[:3]
  answer = tiny_library(lang, "answer")
  assert [k[:2] for k in answer] == [k[:2] for k in lib]
  hosts = [assemble(lang.decode(t), tok, CFG) for *_, t in answer]
  env = ProgramEnv(CFG)
  keys = jax.random.split(jax.random.PRNGKey(3), len(hosts))

  @jax.jit
  def render(keys, progs):
    _, st = jax.vmap(env.reset)(keys, progs)
    return jax.vmap(env.render_hint)(st, progs), jax.vmap(env.render_solution)(st, progs)

  hint, sol = jax.device_get(render(keys, stack_programs(hosts)))
  for i, (name, level, _) in enumerate(answer):
    h = tok.decode(hint.ids[i][: hint.length[i]])
    s = tok.decode(sol.ids[i][: sol.length[i]])
    assert s.startswith(BOXED) and s.endswith("}"), (name, level, s)
    assert h == "The answer is " + s[len(BOXED) : -1] + ".", (name, level, h, s)
  with pytest.raises(ValueError, match="hints must be one of"):
    tiny_library(lang, "prose")


def test_language_is_a_hashable_static_argument(setup):
  tok, lang = setup[0], setup[1]
  again = Language.make(tok)
  assert again == lang and hash(again) == hash(lang)
  with pytest.raises(ValueError, match="shortest program"):
    Language.make(tok, max_tokens=8)
  assert isinstance(jnp.asarray(lang.dummy_tokens), jax.Array)


def test_feasibility_check_rejects_programs_whose_own_answer_does_not_win(setup):
  lang = setup[1]
  lib = setup[2]
  streams = [
    ("valid", lang.encode(_VALID), "ok"),
    ("no reward", lang.encode(_VALID.replace("case r2 1000 stop", "case r2 0 stop")), INFEASIBLE),
    (
      "no termination",
      lang.encode(_VALID.replace("case r2 1000 stop", "case r2 1000 go")),
      INFEASIBLE,
    ),
    (
      "wins on the wrong answer",
      lang.encode(_VALID.replace("eq r2 guess r0", "ne r2 guess r0")),
      INFEASIBLE,
    ),
    (
      "check failure keeps its reason",
      lang.encode(_VALID.replace("rand r1 -4 9", "rand r1 9 -4")),
      None,
    ),
  ]
  streams += [(name, t, "ok") for name, _, t in lib]
  width = max(len(t) for _, t, _ in streams) + 2
  tokens = np.zeros((len(streams), width), np.int32)
  for i, (_, t, _) in enumerate(streams):
    tokens[i, : len(t)] = t
  programs, ok, reason = jax.device_get(assemble_and_validate(lang, tokens, jax.random.PRNGKey(3)))
  _, ok_before, reason_before = jax.device_get(assemble_tokens(lang, tokens))
  dummy = jax.device_get(dummy_program(lang))
  # the placeholder of rejected rows never pays out (so it is not feasible either)
  assert not bool(feasible(lang, jax.tree.map(lambda x: x[None], dummy), jax.random.PRNGKey(0))[0])
  for i, (name, _, want) in enumerate(streams):
    if want is None:  # rejected before the feasibility check: same reason as assemble_tokens
      assert not ok[i] and reason[i] == reason_before[i] != INFEASIBLE, name
    elif want == INFEASIBLE:
      assert ok_before[i] and not ok[i] and reason[i] == INFEASIBLE, name
      assert _equal(_row(programs, i), dummy) == [], name
    else:
      assert ok[i] and REASONS[reason[i]] == "ok", name
