"""The translator: library twins and translatable fixtures lower to programs that pass the
differential check against their sandboxed originals; everything outside the subset is refused
with the construct and line that blocked it; deliberately wrong translations are rejected; the
`check` CLI reports the translation.

All checks share one sandbox pool and the translator's one interpreter compilation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from envs_fixtures import tokenizer
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.envs.ir.program import DEFAULT_CONFIG
from spade_jax.envs.library import FAMILIES
from spade_jax.envs.sandbox import check
from spade_jax.envs.sandbox import policy as sandbox_policy
from spade_jax.envs.sandbox.pool import SandboxPool
from spade_jax.envs.sandbox.validate import repair_fstrings
from spade_jax.envs.translate import lowering as translate_lowering
from spade_jax.envs.translate.check import PROBE_CLASS, probe_source
from spade_jax.envs.translate.emit import Emitter
from spade_jax.envs.translate.pipeline import ByteTokenizer, translate, translate_and_check

FIXTURES = Path(__file__).parent / "fixtures" / "envs" / "valid"
SEEDS = 64


def fixture(name: str) -> str:
  return next(FIXTURES.glob(f"{name}_*.py")).read_text()


@pytest.fixture(scope="module")
def pool():
  with SandboxPool(2) as p:
    yield p


def run(source, pool, seeds=SEEDS, **kw):
  return translate_and_check(
    source, None, tokenizer=tokenizer("tiny"), seeds=seeds, pool=pool, **kw
  )


def refusal(source: str, **kw) -> str:
  tr = translate(source, tokenizer("tiny"), kwargs=kw or None)
  assert tr.program is None, tr.assembly
  return tr.reason


# ----------------------------------------------------------------------------- accepted
def test_every_library_twin_at_every_level_translates_and_matches(pool):
  for f in FAMILIES.values():
    for level in f.levels:
      out = run(f.twin_source(), pool, kwargs=level)
      assert out["translated"], (f.name, level, out["translation_reason"])
      assert out["checked_episodes"] == 3 * SEEDS
      assert out["answer_parse"] == "exact" and out["translation_reason"] == ""
      assert out["program"] is not None and out["assembly"].startswith("turns ")


@pytest.mark.parametrize("name", ["v01", "v02", "v03", "v05"])
def test_translatable_fixtures_pass_the_check(pool, name):
  out = run(fixture(name), pool)
  assert out["translated"], out["translation_reason"]
  assert out["answer_parse"].startswith("approximate")  # regex answers (non-ASCII digits ...)


def test_v04_sample_from_a_range_of_59_values_translates(pool):
  """`random.sample(range(1, 60), 5)` is `rsample` (the population is never listed)."""
  out = run(fixture("v04"), pool, seeds=16)
  assert out["translated"], out["translation_reason"]
  assert "rsample" in out["assembly"]


@pytest.mark.parametrize(
  "name, line, construct",
  [
    ("v10", 18, "expected an int, got text"),  # letters kept in a run-time list
    ("v11", 15, "expected an int, got text"),
    ("v12", 16, "expected an int, got text"),  # a sample of dict keys (strings)
    ("v13", 15, "random.uniform is outside the translatable subset"),
    ("v14", 3, "import collections is outside the translatable subset"),
    ("v15", 19, "solution() must return ints"),
    ("v16", 21, "class CaesarEnv has base classes"),
  ],
)
def test_host_only_fixtures_are_refused_with_construct_and_line(name, line, construct):
  source = repair_fstrings(fixture(name))[0]  # the validator's repaired source (v15)
  reason = refusal(source)
  assert reason.startswith(f"line {line}: ") and construct in reason, reason


KITCHEN = r"""import math
import random
import re

HINTS = ("even", "odd")


def clamp(x, lo, hi):
  return max(lo, min(hi, x))


class KitchenEnv:
  def __init__(self, max_turns=5, n=4, scale=3):
    self.max_turns, self.n, self.scale = max_turns, n, scale
    self.reset()

  def _pick(self):
    return self.rng.randint(-20, 20)

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    vals = [self._pick() for _ in range(self.n)]
    vals[0] = clamp(vals[0], -5, 5)
    self.order = list(range(1, 6))
    self.rng.shuffle(self.order)
    q, r = divmod(vals[1], self.scale)
    self.total = 0
    for i, v in enumerate(vals):
      if v % 2 == 0:
        self.total += v * (i + 1)
      else:
        self.total -= v
    self.big = max(vals) if self.total > 0 else min(vals)
    self.second_last = vals[-2]
    self.g = math.gcd(abs(vals[2]) + 1, 12)
    self.parity = HINTS[0] if self.scale % 2 == 0 else HINTS[1]
    self.flag = vals[-1] in (1, 2, 3, -7)
    self.question = f"Values {', '.join(map(str, vals))}; order {self.order[0]}, {self.order[-1]}."
    self.turn, self.best = 0, -1
    return (
      f"{self.question} q={q} r={r} g={self.g} second last={self.second_last} "
      f"({self.parity}). What is the weighted total? \\boxed{{N}}"
    ), {}

  def solution(self):
    return str(self.total)

  def step(self, action):
    self.turn += 1
    m = re.findall(r"\\boxed\{\s*(-?\d+)\s*\}", action)
    if not m:
      return f"Again: {self.question}", 0.0, False, self.turn >= self.max_turns, {}
    guess = int(m[-1])
    close = abs(guess - self.total) <= 3 if -1000 <= guess <= 1000 else False
    if close:
      self.best = self.turn
    if guess == self.total:
      return f"Yes! flag={self.flag} best={self.best}", 1.0, True, False, {}
    elif self.turn >= self.max_turns:
      return f"Out of turns; it was {self.total}.", 0.0, False, True, {}
    side = "low" if guess < self.total else "high"
    return f"Too {side}; big={self.big}", -0.25, False, False, {}
"""


@pytest.mark.parametrize("kw", [{"n": 3}, {"n": 3, "scale": 2, "max_turns": 2}])
def test_many_constructs_at_once(pool, kw):
  """Helpers (inlined), class-level constants, list element stores, shuffle of a built list,
  divmod, negative indexes, an unrolled loop with a run-time if, min/max of lists, gcd, `in`
  a tuple, text kept in an attribute for step(), run-time bools rendered as text, guarded
  ranges, an attribute changed on some paths, if/elif/else returns, a negative reward."""
  out = run(KITCHEN, pool, kwargs=kw)
  assert out["translated"], out["translation_reason"]
  assert out["checked_draw_ranges"] > 0


# ------------------------------------------------------------------------------- refusals
ENV = """import random
import re


class TinyEnv:
  def __init__(self, max_turns=3):
    self.max_turns = max_turns
    self.reset()

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    self.a = self.rng.randint(1, 9)
    self.b = self.rng.randint(-9, 9)
    self.answer = {answer}
    self.turn = 0
    return f"a = {{self.a}}, b = {{self.b}}. Answer in \\\\boxed{{{{}}}}.", {{}}

  def solution(self):
    return str(self.answer)

  def step(self, action):
    self.turn += 1
    {step_extra}
    found = re.findall(r"\\\\boxed\\{{\\s*(-?\\d+)\\s*\\}}", action)
    if found and int(found[-1]) == self.answer:
      return "Correct.", 1.0, True, False, {{}}
    return "Wrong.", {reward}, False, self.turn >= self.max_turns, {{}}
"""


def env(answer="self.a * self.b", step_extra="pass", reward="0.0") -> str:
  return ENV.format(answer=answer, step_extra=step_extra, reward=reward)


@pytest.mark.parametrize(
  "kw, line, pattern",
  [
    ({"answer": "self.a * 0.5"}, 19, r"`str\(self\.answer\)`: a float shown as text"),
    ({"answer": "self.a / self.b"}, 14, r"`self\.a / self\.b`: float division"),
    ({"answer": "round(self.a, 1)"}, 14, r"`round\(self\.a, 1\)` is outside the translatable"),
    ({"answer": "abs(hash(self.a))"}, 14, r"name `hash` is not defined here"),
    ({"answer": "int(str(self.a) + '0')"}, 14, r"int\(\) of text"),
    ({"answer": "sorted([self.a, self.b], key=abs)[0]"}, 14, r"sorted with a key"),
    ({"reward": "-0.0001"}, 27, r"-0\.0001 is not a multiple of 0\.001"),
  ],
)
def test_refusals_name_the_construct_and_line(kw, line, pattern):
  reason = refusal(env(**kw))
  assert reason.startswith(f"line {line}: ") and re.search(pattern, reason), reason


def test_baseline_of_the_refusal_template_translates(pool):
  assert run(env(), pool, seeds=8)["translated"]


def test_draws_in_step_replay_through_the_episode(pool):
  source = env(step_extra="self.b = self.rng.randint(-5, 5)")
  source = source.replace('return "Wrong."', 'return f"Wrong. b is now {self.b}."')
  out = run(source, pool, seeds=16)
  assert out["translated"], out["translation_reason"]
  assert "rand" in out["assembly"].split("step")[1]


@pytest.mark.parametrize(
  "kw",
  [
    # a draw under a run-time condition: drawn where Python draws it, the tape stays aligned
    {"step_extra": "self.a = self.rng.randint(1, 5) if self.b > 0 else self.a"},
    # a while loop (an IR loop bounded by the interpreter's fuel)
    {"step_extra": "while self.a > 3:\n      self.a -= 2"},
    # a loop far longer than any unrolling
    {"answer": "sum(i % 7 for i in range(self.a * 100))"},
    # a reward computed at run time, in thousandths
    {"reward": "0.1 * (self.turn % 3)"},
    # floor division by a divisor that may be zero is only reached when b != 0
    {"answer": "self.a // self.b if self.b != 0 else 0"},
    # arithmetic on the parsed answer: int32 only overflows for absurd answers
    {"step_extra": "self.a = self.a + 1"},
  ],
)
def test_constructs_beyond_the_old_subset_translate_and_match(pool, kw):
  out = run(env(**kw), pool, seeds=8)
  assert out["translated"], out["translation_reason"]


@pytest.mark.parametrize(
  "old, new",
  [
    ("self.turn += 1", "self.turn += 2"),  # no "turn counter": truncation is computed
    ("self.turn >= self.max_turns, {}", "False, {}"),  # no turn limit at all
    (  # a return whose truncated flag is not the turn limit
      '    return "Wrong.", 0.0,',
      '    if self.b > 0:\n      return "No.", 0.0, False, False, {}\n    return "Wrong.", 0.0,',
    ),
    ('r"\\\\boxed\\{\\s*(-?\\d+)', 'r"\\\\boxed\\{\\s*(\\d+)'),  # another answer grammar
  ],
)
def test_more_spellings_translate(pool, old, new):
  source = env()
  assert old in source, old
  out = run(source.replace(old, new), pool, seeds=8)
  assert out["translated"], out["translation_reason"]


@pytest.mark.parametrize(
  "old, new, pattern",
  [
    (
      "self.rng = random.Random(seed)",
      "self.rng = random.Random(42)",
      r"seed only with reset\(\)'s seed",
    ),
    ("self.rng.randint(1, 9)", "self.rng.random()", r"random\.random is outside"),
  ],
)
def test_more_refusals(old, new, pattern):
  source = env()
  assert old in source, old
  reason = refusal(source.replace(old, new))
  assert re.match(r"line \d+: ", reason) and re.search(pattern, reason), reason


def test_values_python_keeps_and_int32_cannot_are_rejected_by_the_check(pool):
  """Arithmetic is checked int32 at run time: a value that outgrows int32 faults in the
  interpreter while Python goes on, and the differential check rejects the translation; the
  same environment with a shorter game stays in range and is accepted."""
  grow = env(step_extra="self.a = self.a * 10")
  grow = grow.replace('return "Wrong."', 'return f"Wrong. a is now {self.a}."')
  out = run(grow, pool, seeds=8, kwargs={"max_turns": 30})
  assert not out["translated"] and "differential check failed" in out["translation_reason"]
  out = run(grow, pool, seeds=8, kwargs={"max_turns": 5})  # 9 * 10**5 fits: accepted
  assert out["translated"], out["translation_reason"]
  huge = run(env(answer="self.a * 10 ** 9"), pool, seeds=4)
  assert not huge["translated"] and "fault" in huge["translation_reason"]


def test_terminated_and_truncated_at_once_is_rejected(pool):
  """The interpreter's outcome is one of go / terminated / truncated: an environment that
  reports both is not accepted."""
  source = env().replace('"Correct.", 1.0, True, False', '"Correct.", 1.0, True, True')
  out = run(source, pool, seeds=4)
  assert not out["translated"] and "differential check failed" in out["translation_reason"]


def test_state_carried_across_episodes_is_refused():
  """Shuffling a class constant or an __init__ list in reset() makes each episode depend on the
  previous ones (the interpreter starts every episode afresh): refused; a copy is fine."""
  base = env().replace("    self.a = self.rng.randint(1, 9)\n", "    DRAW\n")
  klass = base.replace("class TinyEnv:\n", "class TinyEnv:\n  ITEMS = [3, 1, 4, 1, 5]\n\n")
  shuffled = klass.replace("DRAW", "self.rng.shuffle(self.ITEMS)\n    self.a = self.ITEMS[0]")
  assert "shuffle of a constant list" in refusal(shuffled)
  init = base.replace(
    "self.max_turns = max_turns\n", "self.max_turns = max_turns\n    self.items = [3, 1, 4]\n"
  )
  init = init.replace("DRAW", "self.rng.shuffle(self.items)\n    self.a = self.items[0]")
  assert refusal(init).startswith("line 13: ") and "shuffle of a constant list" in refusal(init)
  copied = klass.replace(
    "DRAW", "items = list(self.ITEMS)\n    self.rng.shuffle(items)\n    self.a = items[0]"
  )
  assert translate(copied, tokenizer("tiny")).program is not None


# ------------------------------------------------------------------ wrong translations
def test_truncating_division_is_rejected(pool, monkeypatch):
  """A lowering with C's truncating ``//`` instead of Python's floor is caught by the check."""
  assert run(fixture("v03"), pool, seeds=16)["translated"]
  real = Emitter.emit

  def truncating(self, op, *args):
    if op != "div":
      return real(self, op, *args)
    d, a, b = args
    q, neg = self.temp(), self.temp()
    real(self, "abs", q, a)
    real(self, "abs", neg, b)
    real(self, "div", q, q, neg)
    real(self, "lt", neg, a, 0)
    real(self, "ne", neg, neg, 0)
    t = self.temp()
    real(self, "lt", t, b, 0)
    real(self, "ne", neg, neg, t)
    real(self, "neg", t, q)
    real(self, "sel", d, neg, t, q)

  monkeypatch.setattr(Emitter, "emit", truncating)
  out = run(fixture("v03"), pool, seeds=16)
  assert not out["translated"] and out["program"] is None
  assert re.search(
    r"differential check failed: \d+/48 episodes differ; first: seed \d+", out["translation_reason"]
  )


@pytest.mark.parametrize("delta, verdict", [(-1, "rejects it"), (1, "accepts it")])
def test_wrong_draw_range_is_rejected(pool, monkeypatch, delta, verdict):
  """A randint range off by one is caught even when no seed draws the extreme value: the
  check replays the ends of Python's recorded ranges and one past them."""
  real = Emitter.emit

  def shifted(self, op, *args):
    if op == "rand" and isinstance(args[2], int):
      args = (args[0], args[1], args[2] + delta)
    return real(self, op, *args)

  monkeypatch.setattr(Emitter, "emit", shifted)
  out = run(FAMILIES["guess_number"].twin_source(), pool, seeds=4)
  assert not out["translated"]
  edge = 100 if delta < 0 else 101
  assert (
    f"seed 0: draw 1 (randint over [1, 100] in Python) replayed as {edge}: the program "
    f"{verdict} (draw ranges differ)"
  ) in out["translation_reason"]


def test_first_match_regex_env_matches_python(pool):
  """`re.search` takes the first \\boxed{} whose content matches, `findall(...)[-1]` the last:
  the device parser's answer modes follow each, and the two-box answers of the scripts check
  it."""
  source = (
    fixture("v02").replace("re.findall(", "re.search(").replace("found[-1]", "found.group(1)")
  )
  out = run(source, pool, seeds=16)
  assert out["translated"], out["translation_reason"]
  assert "parse signed_ws first" in out["assembly"]
  assert "parse signed_ws last" in run(fixture("v02"), pool, seeds=4)["assembly"]


def test_constants_folded_for_other_arguments_are_rejected(pool, monkeypatch):
  real = translate_lowering.lower_source
  import spade_jax.envs.translate.pipeline as tr_mod

  monkeypatch.setattr(tr_mod, "lower_source", lambda s, cfg, kwargs=None: real(s, cfg))
  out = run(FAMILIES["guess_number"].twin_source(), pool, seeds=8, kwargs={"high": 1000})
  assert not out["translated"] and "expected observation" in out["translation_reason"]


# --------------------------------------------------------------------------- mechanics
def test_probe_is_transparent_and_passes_the_static_policy(pool):
  """The recording probe draws exactly what CPython's random draws: probed and unprobed
  originals give the same observations and solutions on the same seeds."""
  for source in [fixture("v01"), fixture("v03")] + [
    FAMILIES[n].twin_source() for n in ("mastermind", "missing_number", "gcd_lcm")
  ]:
    _, cls = sandbox_policy.check_source(source)
    probed = probe_source(source, cls)
    assert probed.startswith(source.rstrip("\n")) and sandbox_policy.check_source(probed)[0] is None
    kwargs = {"distinct": True} if "MastermindEnv" in source else None
    plain = pool.make_envs(source, 8, kwargs=kwargs)
    probe = pool.make_envs(probed, 8, class_name=PROBE_CLASS, static_check=False, kwargs=kwargs)
    a = pool.reset_many(plain, range(8))
    b = pool.reset_many(probe, range(8))
    assert [x[0] for x in a] == [x[0] for x in b]
    assert all(len(x[1]["spade_draws"]) > 0 for x in b)
    sa = pool.call_many(plain, "solution", [None] * 8)
    assert sa == pool.call_many(probe, "solution", [None] * 8)
    pool.close_envs(plain + probe)


def test_accepted_program_with_its_own_draws_stays_in_the_python_ranges(pool):
  import jax

  from spade_jax.envs.translate.check import _interpreter

  out = run(FAMILIES["guess_number"].twin_source(), pool, seeds=4, kwargs={"low": -50, "high": 50})
  reset, _ = _interpreter(DEFAULT_CONFIG)
  keys = jax.random.split(jax.random.key(3), 64)
  obs, state, sol = reset(
    keys, out["program"], np.zeros((64, 64), np.int32), np.zeros(64, np.int32)
  )
  answers = np.asarray(sol.values)[:, 0]
  assert answers.min() >= -50 and answers.max() <= 50 and len(set(answers.tolist())) > 20
  assert not np.asarray(state.fault).any()


def test_hint_goes_into_the_hint_template():
  from spade_jax.envs.ir.program import TPL_HINT
  from spade_jax.envs.ir.text import template_items

  tok = tokenizer("tiny")
  tr = translate(FAMILIES["nim"].twin_source(), tok, hint="Leave a multiple of k + 1.")
  assert template_items(tr.program, TPL_HINT, tok) == [("text", "Leave a multiple of k + 1.")]
  tr = translate(FAMILIES["nim"].twin_source(), tok, hint="x" * 5000)
  assert tr.program is None and tr.reason.startswith("the hint does not build")


def test_byte_tokenizer_fallback_and_validation_verdict(pool):
  out = translate_and_check(fixture("v02"), None, tokenizer=ByteTokenizer(), seeds=8, pool=pool)
  assert out["translated"] and out["tokenizer"] == "bytes"

  class Invalid:
    valid = False

  out = translate_and_check(fixture("v02"), Invalid(), tokenizer=ByteTokenizer())
  assert not out["translated"] and out["translation_reason"].startswith("not attempted")


def test_check_cli_reports_the_translation(capsys):
  path = FIXTURES / "v02_arithmetic.py"
  args = [str(path), "--json", "--seeds", "4", "--tokenizer", tiny_tokenizer_dir()]
  assert check.main(args) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["valid"] and out["translated"] is True and out["translation_reason"] == ""
  assert out["checked_episodes"] == 12 and "program" not in out
  assert out["assembly"].startswith("turns ") and "translate" in out["timings"]
