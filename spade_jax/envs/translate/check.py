"""Differential check: a translated program must behave like its Python original, which runs
only in the sandbox.

Same draws. The original is loaded into sandboxed workers with a small *probe* appended to
its source: ``random`` (and ``random.Random``) are rebound to a recording subclass of
CPython's ``random.Random`` that logs every draw in the interpreter's tape format (`draws.py`:
``randint``/``randrange`` the value, ``choice`` the index, ``sample`` the indices (also for ``sample(range(a, b), k)``, which the interpreter's
``rsample`` replays as values ``a + index``), ``shuffle``
the permutation) while consuming the generator exactly as CPython does, and a ``_SpadeProbe``
subclass of the environment class returns that log in ``info``. The environment's own code is
not changed, so it draws exactly what it would draw unprobed. Each Python episode is played
to its end first; the interpreter then replays the episode's whole tape
(`ProgramEnv.reset_with_tape`) and plays the same answers. A replayed value outside the range
the translated program asks for is an interpreter fault, so draws of the wrong shape are
caught too.

Episodes: for every seed, three scripts built from the Python ``solution()``: ``oracle`` (the
solution, boxed as the validator does), ``probe`` (off by one high and low, no box, random
ints, two boxes, an empty and a junk box, a wrong count, then the solution) and ``exhaust``
(wrong answers until the turns run out). Compared per reset and per step: the decoded
observation text, the solution's ints, the reward (as float32), terminated, truncated, the
number of draws so far, and that the interpreter raised no fault.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import random

import numpy as np

from spade_jax.envs.ir.parse import parse_boxed, text_action
from spade_jax.envs.ir.program import Action, ProgramConfig
from spade_jax.envs.sandbox import policy as sandbox_policy
from spade_jax.envs.sandbox.pool import EnvError

SCRIPTS = ("oracle", "probe", "exhaust")
BATCH = 64  # interpreter episodes per call (one compilation for any number of episodes)
PROBE_CLASS = "_SpadeProbe"
_PROBE = """

import random as _spade_random

_spade_tape = []
_spade_ranges = []


def _spade_log(values, kind, lo, hi):
  start = len(_spade_tape)
  for v in values:
    _spade_tape.append(v)
    _spade_ranges.append([kind, lo, hi, start, len(values)])


class _SpadeRandom(_spade_random.Random):
  def randrange(self, start, stop=None, step=1):
    value = super().randrange(start, stop, step)
    lo, hi = (0, start - 1) if stop is None else (start, stop - 1)
    _spade_log([value], "v" if step == 1 else "x", lo, hi)
    return value

  def choice(self, seq):
    i = super().choice(range(len(seq)))
    _spade_log([i], "i", 0, len(seq) - 1)
    return seq[i]

  def sample(self, population, k, **kwargs):
    # A range is indexed as is (rsample populations reach 2**20 and more).
    pop = population if isinstance(population, range) else list(population)
    idx = super().sample(range(len(pop)), k)
    _spade_log(idx, "i", 0, len(pop) - 1)
    return [pop[i] for i in idx]

  def shuffle(self, x):
    perm = list(range(len(x)))
    super().shuffle(perm)
    _spade_log(perm, "i", 0, len(x) - 1)
    x[:] = [x[i] for i in perm]


_spade_module_rng = _SpadeRandom()


class _SpadeRandomModule:
  Random = _SpadeRandom

  def seed(self, *args):
    _spade_module_rng.seed(*args)

  def randint(self, a, b):
    return _spade_module_rng.randint(a, b)

  def randrange(self, *args):
    return _spade_module_rng.randrange(*args)

  def choice(self, seq):
    return _spade_module_rng.choice(seq)

  def sample(self, population, k):
    return _spade_module_rng.sample(population, k)

  def shuffle(self, x):
    _spade_module_rng.shuffle(x)


class _SpadeProbe({cls}):
  def reset(self, seed=None):
    del _spade_tape[:]
    del _spade_ranges[:]
    out = super().reset(seed)
    return out[0], {{"spade_draws": list(_spade_tape), "spade_ranges": list(_spade_ranges)}}

  def step(self, action):
    out = super().step(action)
    info = {{"spade_draws": list(_spade_tape), "spade_ranges": list(_spade_ranges)}}
    return out[0], out[1], out[2], out[3], info

"""


class CheckError(Exception):
  """The check could not run (as opposed to finding a difference)."""


def probe_source(source: str, class_name: str) -> str:
  """The source with the draw-recording probe appended (see the module docstring)."""
  if "_spade" in source:
    raise CheckError("the source uses the reserved prefix '_spade'")
  lines = [source.rstrip("\n"), _PROBE.format(cls=class_name)]
  for node in ast.parse(source).body:
    if isinstance(node, ast.Import):
      for al in node.names:
        if al.name == "random":
          lines.append(f"{al.asname or 'random'} = _SpadeRandomModule()")
    elif isinstance(node, ast.ImportFrom) and node.module == "random":
      for al in node.names:
        if al.name in ("randint", "randrange", "choice", "sample", "shuffle", "seed"):
          lines.append(f"{al.asname or al.name} = _spade_module_rng.{al.name}")
        elif al.name == "Random":
          lines.append(f"{al.asname or al.name} = _SpadeRandom")
  return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Episode:
  seed: int
  kind: str
  obs: str = ""
  solution: str = ""
  answers: list = dataclasses.field(default_factory=list)
  steps: list = dataclasses.field(default_factory=list)  # (obs, reward, term, trunc, n_draws)
  reset_draws: int = 0
  tape: list = dataclasses.field(default_factory=list)
  ranges: list = dataclasses.field(default_factory=list)  # per draw: kind, lo, hi, group
  error: str | None = None


def scripts(kind: str, solution: str, max_turns: int, rng: random.Random, cfg) -> list[str]:
  """Answer texts for one episode (see the module docstring)."""
  right = f"\\boxed{{{solution}}}"
  ints = parse_boxed(right, cfg.list_len) or [0]
  box = lambda vals: "\\boxed{" + ", ".join(str(v) for v in vals) + "}"
  high, low = box(ints[:-1] + [ints[-1] + 1]), box([ints[0] - 1] + ints[1:])
  rand = box([rng.randint(-20, 120) for _ in ints])
  count = box(ints + [ints[-1]]) if len(ints) < cfg.list_len else box(ints[:-1])
  if kind == "oracle":
    return [right]
  if kind == "probe":
    wrong = [high, "I am not sure yet.", low, rand, f"{right} no, wait: {high}", count]
    wrong += ["\\boxed{}", "\\boxed{x}"]
    return wrong[: max_turns - 1] + [f"First {low}, but finally {right}"]
  wrong = [high, low, rand, "no idea", "\\boxed{}", "\\boxed{ab}", count, box([ints[0] - 2])]
  return [rng.choice(wrong) for _ in range(max_turns)]


def run_python(pool, source, class_name, kwargs, episodes, max_turns, cfg, timeout) -> None:
  """Plays every episode in the sandbox (fills in the `Episode` records)."""
  probe = probe_source(source, class_name)
  issue, _ = sandbox_policy.check_source(probe)
  if issue is not None:
    raise CheckError(f"the probed source fails the static check: {issue}")
  envs = pool.make_envs(
    probe, len(episodes), class_name=PROBE_CLASS, kwargs=kwargs, static_check=False, timeout=timeout
  )
  live = []
  for ep, env in zip(episodes, envs):
    if isinstance(env, EnvError):
      ep.error = f"loading raised {type(env).__name__}: {env}"
    else:
      live.append((ep, env))
  out = pool.reset_many([e for _, e in live], [ep.seed for ep, _ in live], timeout)
  sols = pool.call_many([e for _, e in live], "solution", [None] * len(live), timeout)
  playing = []
  for (ep, env), res, sol in zip(live, out, sols):
    for r in (res, sol):
      if isinstance(r, EnvError) and ep.error is None:
        ep.error = f"reset/solution raised {type(r).__name__}: {r}"
    if ep.error is None:
      ep.obs, ep.solution = res[0], str(sol)
      ep.tape = list(res[1].get("spade_draws", []))
      ep.ranges = list(res[1].get("spade_ranges", []))
      ep.reset_draws = len(ep.tape)
      ep.answers = scripts(ep.kind, ep.solution, max_turns, random.Random(ep.seed), cfg)
      playing.append((ep, env))
  for t in range(max_turns):
    playing = [(ep, env) for ep, env in playing if t < len(ep.answers)]
    if not playing:
      break
    outs = pool.step_many([e for _, e in playing], [ep.answers[t] for ep, _ in playing], timeout)
    still = []
    for (ep, env), res in zip(playing, outs):
      if isinstance(res, EnvError):
        ep.error = f"step {t + 1} raised {type(res).__name__}: {res}"
        continue
      obs, reward, term, trunc, info = res
      ep.tape = list(info.get("spade_draws", []))
      ep.ranges = list(info.get("spade_ranges", []))
      ep.steps.append((obs, reward, term, trunc, len(ep.tape)))
      if not (term or trunc):
        still.append((ep, env))
    playing = still
  pool.close_envs([e for _, e in live])


@functools.cache
def _interpreter(cfg: ProgramConfig):
  import jax

  from spade_jax.envs.ir.interpreter import ProgramEnv

  env = ProgramEnv(cfg)

  def reset(key, program, tape, tape_len):
    obs, state = env.reset_with_tape(key, program, tape, tape_len)
    return obs, state, env.solution_action(state, program)

  def step(key, state, action, program):
    return env.transition(key, state, action, program)

  return (
    jax.jit(jax.vmap(reset, in_axes=(0, None, 0, 0))),
    jax.jit(jax.vmap(step, in_axes=(0, 0, 0, None))),
  )


def _actions(texts, cfg) -> Action:
  acts = [text_action(t, cfg) for t in texts]
  return Action(*(np.stack([np.asarray(getattr(a, f)) for a in acts]) for f in Action._fields))


def _short(x, n=160) -> str:
  s = repr(x)
  return s if len(s) <= n else s[: n - 3] + "..."


def compare(program, episodes, tokenizer, cfg: ProgramConfig) -> tuple[str | None, int]:
  """Replays the episodes in the interpreter -> (first difference or None, episodes checked)."""
  import jax

  reset, step = _interpreter(cfg)
  decode = lambda ids, n: tokenizer.decode([int(i) for i in ids[: int(n)]])
  first: dict[int, str] = {}
  for start in range(0, len(episodes), BATCH):
    chunk = episodes[start : start + BATCH]
    pad = chunk + [chunk[-1]] * (BATCH - len(chunk))
    tape = np.zeros((BATCH, cfg.n_draws), np.int32)
    tape_len = np.zeros(BATCH, np.int32)
    for i, ep in enumerate(pad):
      n = min(len(ep.tape), cfg.n_draws)
      tape[i, :n], tape_len[i] = ep.tape[:n], n
    keys = jax.random.split(jax.random.key(start), BATCH)
    obs, state, sol = jax.device_get(reset(keys, program, tape, tape_len))
    for i, ep in enumerate(chunk):
      k, where = start + i, f"seed {ep.seed} ({ep.kind} script)"
      if ep.error is not None:
        first[k] = f"{where}: the Python original {ep.error}"
      elif len(ep.tape) > cfg.n_draws:
        first[k] = f"{where}: {len(ep.tape)} draws exceed the interpreter's n_draws {cfg.n_draws}"
      elif (got := decode(obs.ids[i], obs.length[i])) != ep.obs:
        first[k] = f"{where}, reset: expected observation {_short(ep.obs)}, got {_short(got)}"
      elif int(state.fault[i]):
        first[k] = f"{where}, reset: interpreter fault {int(state.fault[i])}"
      elif int(state.n_draws[i]) != ep.reset_draws:
        first[k] = (
          f"{where}, reset: Python drew {ep.reset_draws} values, interpreter {int(state.n_draws[i])}"
        )
      else:
        want = parse_boxed(f"\\boxed{{{ep.solution}}}", cfg.list_len)
        have = [int(v) for v in sol.values[i][: int(sol.count[i])]]
        if want != have:
          first[k] = (
            f"{where}: solution() {_short(ep.solution)} parses to {want}, program answer {have}"
          )
    turns = max(len(ep.steps) for ep in chunk)
    for t in range(turns):
      texts = [ep.answers[t] if t < len(ep.steps) else "" for ep in pad]
      keys = jax.random.split(jax.random.key(1000 + start + t), BATCH)
      obs, state, reward, term, trunc, info = jax.device_get(
        step(keys, state, _actions(texts, cfg), program)
      )
      for i, ep in enumerate(chunk):
        k = start + i
        if k in first or t >= len(ep.steps):
          continue
        exp = ep.steps[t]
        got = (decode(obs.ids[i], obs.length[i]), float(reward[i]), bool(term[i]), bool(trunc[i]))
        if t + 1 == int(program.max_turns) and not exp[2] and got[2:4] == (False, True):
          got = (*got[:3], bool(exp[3]))  # the interpreter's structural cut (turn >= max_turns)
        where = f"seed {ep.seed} ({ep.kind} script), turn {t + 1}, answer {_short(texts[i], 60)}"
        if got[0] != exp[0]:
          first[k] = f"{where}: expected observation {_short(exp[0])}, got {_short(got[0])}"
        elif np.float32(exp[1]) != np.float32(got[1]) or exp[2:4] != got[2:4]:
          first[k] = f"{where}: expected (reward, terminated, truncated) {exp[1:4]}, got {got[1:4]}"
        elif int(info["fault"][i]):
          first[k] = f"{where}: interpreter fault {int(info['fault'][i])}"
        elif int(state.n_draws[i]) != exp[4]:
          first[k] = (
            f"{where}: Python drew {exp[4]} values so far, interpreter {int(state.n_draws[i])}"
          )
  if first:
    k = min(first)
    return f"{len(first)}/{len(episodes)} episodes differ; first: {first[k]}", len(episodes)
  return None, len(episodes)


def draw_variants(episodes, cfg: ProgramConfig, max_seeds: int = 16) -> list:
  """Boundary replays of recorded draws: (episode, tape, must_fault, what). Per seed, the
  episode with the longest tape; every ``randint`` draw replayed as the ends of Python's range
  (accepted) and one past them (a fault); every choice/sample/shuffle group with the last index
  of Python's population (accepted) and one past it (a fault). Draws after the replaced one are
  the interpreter's own."""
  best: dict[int, Episode] = {}
  for ep in episodes:
    if ep.error is None and len(ep.tape) == len(ep.ranges) and len(ep.tape) <= cfg.n_draws:
      if ep.seed not in best or len(ep.tape) > len(best[ep.seed].tape):
        best[ep.seed] = ep
  out = []
  for seed in sorted(best)[:max_seeds]:
    ep = best[seed]
    for j, (kind, lo, hi, start, size) in enumerate(ep.ranges):
      what = f"seed {seed}: draw {j + 1}"
      if kind == "v":
        for v, bad in ((lo, False), (hi, False), (lo - 1, True), (hi + 1, True)):
          if -(2**31) <= v < 2**31:
            desc = f"{what} (randint over [{lo}, {hi}] in Python) replayed as {v}"
            out.append((ep, ep.tape[:j] + [v], bad, desc))
      elif kind == "i" and j == start:
        group = ep.tape[start : start + size]
        good = list(group)
        if hi in good:
          m = good.index(hi)
          good[0], good[m] = good[m], good[0]
        else:
          good[0] = hi
        bad = [hi + 1] + group[1:]
        desc = f"{what} (index into {hi + 1} values in Python) replayed as"
        out.append((ep, ep.tape[:start] + good, False, f"{desc} {good[0]}"))
        out.append((ep, ep.tape[:start] + bad, True, f"{desc} {hi + 1}"))
  return out


def check_draw_ranges(program, episodes, cfg: ProgramConfig, max_seeds: int = 16):
  """(first draw whose range differs between Python and the program, or None; variants run)."""
  import jax

  from spade_jax.envs.ir.program import FAULT_RANDOM

  reset, step = _interpreter(cfg)
  variants = draw_variants(episodes, cfg, max_seeds)
  for start in range(0, len(variants), BATCH):
    chunk = variants[start : start + BATCH]
    pad = chunk + [chunk[-1]] * (BATCH - len(chunk))
    tape = np.zeros((BATCH, cfg.n_draws), np.int32)
    tape_len = np.array([len(t) for _, t, _, _ in pad], np.int32)
    for i, (_, t, _, _) in enumerate(pad):
      tape[i, : len(t)] = t
    keys = jax.random.split(jax.random.key(7 + start), BATCH)
    _, state, _ = reset(keys, program, tape, tape_len)
    for t in range(max(len(ep.steps) for ep, *_ in chunk)):
      texts = [ep.answers[t] if t < len(ep.steps) else "" for ep, *_ in pad]
      _, state, *_ = step(keys, state, _actions(texts, cfg), program)
    faults = np.asarray(jax.device_get(state.fault))
    for i, (_, _, must_fault, desc) in enumerate(chunk):
      hit = bool(faults[i] & FAULT_RANDOM)
      if hit != must_fault:
        verdict = "accepts" if must_fault else "rejects"
        return f"{desc}: the program {verdict} it (draw ranges differ)", len(variants)
  return None, len(variants)
