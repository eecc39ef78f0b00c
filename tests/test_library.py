"""Library families: each program behaves exactly like its Python twin.

Parity method: the interpreter draws (its draw log is in `EnvState.draws`); the twin is reset
with a `DrawReplay` of exactly those values substituted for ``random.Random`` in its module,
so both sides hold the same drawn state. Then both are driven with the same scripted answer
texts; the interpreter gets them as token ids parsed on device. Per turn we compare the
decoded observation with the twin's string, the reward (float32), terminated and truncated,
and require no interpreter fault. The reverse direction (Python draws replayed into the
interpreter through a tape) is checked too.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from envs_fixtures import B, reset_batch, step_batch, tokenizer

from spade_jax.envs.ir.draws import DrawRecorder, DrawReplay, substitute_random
from spade_jax.envs.ir.parse import parse_boxed
from spade_jax.envs.ir.program import DEFAULT_CONFIG
from spade_jax.envs.library import FAMILIES

SEEDS_PER_LEVEL = 70  # x 3 levels = 210 seeds per family, each with one scripted episode
SCRIPTS = ("oracle", "probe", "wrong")  # cycled over seeds


def test_library_has_at_least_12_families_with_levels():
  assert len(FAMILIES) >= 12
  skills = {f.skill for f in FAMILIES.values()}
  assert len(skills) >= 4
  for f in FAMILIES.values():
    assert len(f.levels) >= 2
    assert f.twin.__name__.endswith("Env")


@pytest.mark.parametrize("tok_name", ["tiny", "smollm2"])
def test_every_level_builds_and_disassembles(tok_name):
  from spade_jax.envs.ir.assembly import assemble
  from spade_jax.envs.ir.disassembly import disassemble

  tok = tokenizer(tok_name)
  for f in FAMILIES.values():
    for level in f.levels:
      p = f.build(tok, **level)
      assert disassemble(assemble(disassemble(p, tok), tok), tok) == disassemble(p, tok)


def _text(tok, tokens, i):
  return tok.decode(np.asarray(tokens.ids[i][: int(tokens.length[i])]))


def _script(kind: str, answer, rng: random.Random, max_turns: int) -> list[str]:
  """Answer texts for one episode, derived from the true answer."""
  ints = answer if isinstance(answer, list) else [answer]
  box = lambda vals: "\\boxed{" + ", ".join(str(v) for v in vals) + "}"
  right = box(ints)
  high = box(ints[:-1] + [ints[-1] + 1])
  low = box([ints[0] - 1] + ints[1:])
  if kind == "oracle":
    return [f"The answer is {right}."]
  if kind == "probe":
    return [high, "I am not sure yet.", f"maybe {low}", f"Final: {right}"]
  wrong = [
    high,
    low,
    "no idea",
    "\\boxed{x}",
    "\\boxed{1, 2}",
    box(ints + [3]),
    box([rng.randint(-99, 99) for _ in ints]),
    "\\boxed{ -7 }",
    "\\boxed{}",
    f"{right} or rather \\boxed{{{rng.randint(-9, 9)}}}",
    "\\boxed{99999999999}",
  ]
  return [rng.choice(wrong) for _ in range(max_turns)]


def _run_chunk(tok_name, chunk, built, seen):
  """Resets and plays one batch of (family, level index, seed, script) episodes on both
  sides; ``seen[family]`` collects the outcomes reached."""
  tok = tokenizer(tok_name)
  programs = [built[(f.name, li)] for f, li, _, _ in chunk]
  seed = chunk[0][2]
  obs, state, sol = reset_batch(programs, seed=seed, tok_name=tok_name)
  draws, n_draws = np.asarray(state.draws), np.asarray(state.n_draws)
  assert not np.asarray(state.fault)[: len(chunk)].any()
  twins, scripts = [], []
  for i, (f, li, s, kind) in enumerate(chunk):
    twin = f.twin(**f.levels[li])
    replay = DrawReplay(draws[i, : n_draws[i]])
    with substitute_random(f.twin_module, replay):
      text, _ = twin.reset(s)
    assert replay.done(), (f.name, s)
    assert _text(tok, obs, i) == text, (f.name, li, s)
    assert _text(tok, sol, i) == twin.solution()
    twins.append(twin)
    scripts.append(_script(kind, twin.answer, random.Random(s), twin.max_turns))
  done = [False] * len(chunk)
  for turn in range(max(len(x) for x in scripts)):
    texts = [x[turn] if turn < len(x) else "" for x in scripts]
    obs, state, reward, term, trunc, info = step_batch(
      state, programs, texts, seed=seed + turn, tok_name=tok_name
    )
    reward, term, trunc = np.asarray(reward), np.asarray(term), np.asarray(trunc)
    fault = np.asarray(info["fault"])
    for i, twin in enumerate(twins):
      if done[i] or turn >= len(scripts[i]):
        continue
      text, r, te, tr, _ = twin.step(texts[i])
      where = (chunk[i][0].name, chunk[i][1], chunk[i][2], chunk[i][3], turn, texts[i])
      assert _text(tok, obs, i) == text, where
      assert reward[i] == np.float32(r), where
      assert (term[i], trunc[i]) == (te, tr), where
      assert fault[i] == 0, where
      done[i] = te or tr
      outcome = "correct" if r == 1.0 else "terminated" if te else "truncated" if tr else "going"
      seen.setdefault(chunk[i][0].name, set()).add(outcome)


def _parity(tok_name: str, seeds_per_level: int):
  tok = tokenizer(tok_name)
  built = {
    (f.name, li): f.build(tok, **level)
    for f in FAMILIES.values()
    for li, level in enumerate(f.levels)
  }
  episodes = [
    (f, li, 1000 * li + s, SCRIPTS[s % len(SCRIPTS)])
    for f in FAMILIES.values()
    for li in range(len(f.levels))
    for s in range(seeds_per_level)
  ]
  seen = {}
  for start in range(0, len(episodes), B):
    _run_chunk(tok_name, episodes[start : start + B], built, seen)
  return seen


def test_twin_parity():
  """Every family, 210 seeds (3 levels x 70), each with a scripted episode."""
  seen = _parity("tiny", SEEDS_PER_LEVEL)
  for name in FAMILIES:  # every family reached a solve, a wrong answer and running out of turns
    assert {"correct", "going", "truncated"} <= seen[name], (name, seen[name])


def test_twin_parity_with_smollm2_tokens():
  """A smaller run with SmolLM2's tokenizer end to end (rendering and on-device parsing)."""
  seen = _parity("smollm2", 2)
  assert set(seen) == set(FAMILIES)


def test_python_draws_replayed_into_interpreter():
  """Reverse direction: a twin seeded normally records its draws; the interpreter replays
  them as a tape and renders the same observation."""
  tok = tokenizer("tiny")
  rows, texts = [], []
  for f in FAMILIES.values():
    for seed in range(4):
      level = f.levels[seed % len(f.levels)]
      rec = DrawRecorder(seed)
      twin = f.twin(**level)
      with substitute_random(f.twin_module, rec):
        text, _ = twin.reset(seed)
      rows.append((f.build(tok, **level), rec.tape))
      texts.append(text)
  obs, state, _ = reset_batch([r[0] for r in rows], [r[1] for r in rows], seed=7)
  assert not np.asarray(state.fault)[: len(rows)].any()
  for i, text in enumerate(texts):
    assert _text(tok, obs, i) == text


def test_twin_answer_parsers_match_the_reference():
  rng = random.Random(0)
  pieces = [
    "\\boxed{",
    "}",
    "{",
    "-",
    "1",
    "23",
    ",",
    " ",
    "\n",
    "x",
    "\\boxed{-4, 5}",
    "2147483648",
    "é",
    "\\",
    "boxed",
  ]
  texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(2000)]
  for f in FAMILIES.values():
    fn = vars(f.twin_module)["_boxed_ints"]
    for t in texts:
      assert fn(t) == parse_boxed(t, DEFAULT_CONFIG.list_len), (f.name, t)


def test_twins_follow_the_python_contract():
  for f in FAMILIES.values():
    twin = f.twin(**f.levels[0])
    obs, info = twin.reset(seed=3)
    assert isinstance(obs, str) and obs and isinstance(info, dict)
    obs2, _ = f.twin(**f.levels[0]).reset(seed=3)
    assert obs2 == obs  # deterministic under a seed
    out = twin.step("no answer here")
    assert len(out) == 5 and isinstance(out[0], str) and isinstance(out[4], dict)
    assert -1.0 <= out[1] <= 1.0
    twin.reset(seed=3)
    o, r, te, tr, _ = twin.step(twin.solution())
    assert (r, te, tr) == (1.0, True, False)
