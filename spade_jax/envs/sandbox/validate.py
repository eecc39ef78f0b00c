"""Validate designer-written environment code: extract, check statically, probe in the sandbox.

`validate(text)` runs the stages below in order; the first failure ends it and is reported as
`stage` and `reason` in a `ValidationReport` (`stage == "ok"` when all pass). The static stage
also tells the source's `kind`: a *game* (the stages below) or a *tool environment* (a `ToolEnv`
subclass; the same stage names, with the sandboxed stages of sandbox/validate_tool.py).

* `extract`     first fenced python block (else the first unlabeled fence, else the whole text);
                unescaped `{word}` placeholders in f-strings that could only fail (empty, several
                words, or a name bound nowhere in the module) are escaped to `{{word}}`.
* `static`      parse and the policy AST check (sandbox_policy.check_source_kind): allowed
                imports, no dangerous builtins / dunders / frame attributes, exactly one `*Env`
                class with reset/step/solution of the right arity (a tool environment: reset and
                solution, and no step). Nothing runs on the host.
* `load`        exec the module and instantiate the class in a sandboxed worker.
* `contract`    reset(seed) -> (non-empty str, dict); junk answers -> (str, real in [-1, 1],
                bool, bool, dict); solution() -> str; no exceptions.
* `feasibility` after reset(seed), `\\boxed{solution()}` earns reward 1.0 and terminates, for
                every validation seed.
* `dependence`  the answer must depend on the task: the stage fails when `solution()` is the
                same string on every probe seed while the first observation varies (the
                validation seeds, then further seeds up to `dependence_seeds` in all; probing
                stops at the first seed whose solution differs, so a normal environment costs
                no extra call). A small answer space (yes/no, a handful of values) is not
                rejected spuriously: the chance that an answer whose most common value has
                probability p is constant on all 64 probes is p**64 (5e-20 for a fair yes/no,
                1e-3 for p = 0.9). A fixed task (the observation and the solution both constant)
                passes. See `dependence_failure`.
* `determinism` a fresh instance reset with the same seed gives the same observation and
                solution, and so does re-resetting the instance after it has been played.
* `leak`        the solution must not appear verbatim (as a whole token) in the first
                observation on most seeds, unless the answer space is tiny (solutions of at most
                `TINY_ANSWER_CHARS` characters, or fewer than `TINY_DISTINCT` distinct
                solutions over the seeds; sandbox/validate_run.py).

Timeouts hold throughout: each call is bounded by the sandbox's per-call limit and the whole
validation by `total_timeout` (60 s by default); a timeout is reported in the stage that was
running, with "timed out" in the reason. The worker is fresh for each validation and killed
afterwards, so one environment cannot influence another's verdict.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import time
import tokenize
from dataclasses import asdict, dataclass, field

from spade_jax.envs.sandbox import policy as sandbox_policy
from spade_jax.envs.sandbox.pool import SandboxConfig
from spade_jax.envs.sandbox.validate_run import StageFailure, ValidationRun, leak_failure
from spade_jax.envs.sandbox.validate_tool import TOOL_JUNK_ACTIONS, tool_stages

STAGES = (
  "extract",
  "static",
  "load",
  "contract",
  "feasibility",
  "dependence",
  "determinism",
  "leak",
)
JUNK_ACTIONS = (
  "",
  "I am not sure.",
  "\\boxed{}",
  "\\boxed{-1}",
  "\\boxed{0}",
  "\\boxed{abc}",
  "\\boxed{99999999999}",
  "\\boxed{1, 2, 3}",
)


@dataclass(frozen=True)
class ValidatorConfig:
  seeds: tuple[int, ...] = tuple(range(8))
  total_timeout: float = 60.0
  sandbox: SandboxConfig = field(default_factory=SandboxConfig)
  junk_actions: tuple[str, ...] = JUNK_ACTIONS
  dependence_seeds: int = 64  # probe seeds in all (validation seeds first) of `dependence`
  tool_junk_actions: tuple[str, ...] = TOOL_JUNK_ACTIONS  # tool environments (validate_tool)


@dataclass
class ValidationReport:
  """The verdict: `stage` is the first failing stage or "ok"; timings are seconds per stage."""

  valid: bool
  stage: str
  reason: str
  timings: dict[str, float]
  seeds: list[int]
  source: str
  class_name: str | None = None
  repairs: list[str] = field(default_factory=list)
  sandbox_layers: dict = field(default_factory=dict)
  kind: str = "game"  # "game" or "tool" (policy.source_kind)

  def to_dict(self) -> dict:
    return asdict(self)


# -- extract --------------------------------------------------------------------------------

_FENCE_PY = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_FENCE_ANY = re.compile(r"```[ \t]*\r?\n(.*?)```", re.DOTALL)
_WORDS = re.compile(r"[A-Za-z_][\w\- ]*")
_IDENT = re.compile(r"\s*([A-Za-z_]\w*)\s*")


def extract_code(text: str) -> str:
  """The first ```python fenced block, else the first unlabeled fence, else the whole text."""
  for pattern in (_FENCE_PY, _FENCE_ANY):
    m = pattern.search(text)
    if m:
      return m.group(1).strip("\n")
  return text.strip("\n")


def _fstring_spans(code: str) -> list[tuple[int, int]]:
  """(start, end) offsets of f-string literals, found with the tokenizer (3.11 and 3.12+)."""
  lines = code.splitlines(keepends=True)
  starts = [0]
  for line in lines:
    starts.append(starts[-1] + len(line))

  def offset(pos):
    return starts[pos[0] - 1] + pos[1]

  spans, open_at = [], []
  fstart = getattr(tokenize, "FSTRING_START", None)
  fend = getattr(tokenize, "FSTRING_END", None)
  try:
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
      if tok.type == tokenize.STRING:
        prefix = re.match(r"[A-Za-z]*", tok.string).group(0)
        if "f" in prefix.lower():
          spans.append((offset(tok.start), offset(tok.end)))
      elif fstart is not None and tok.type == fstart:
        open_at.append(offset(tok.start))
      elif fend is not None and tok.type == fend and open_at:
        spans.append((open_at.pop(), offset(tok.end)))
  except (tokenize.TokenError, SyntaxError, IndentationError):
    pass
  return spans


def _brace_groups(lit: str):
  """(start, end, content) of the top-level single-brace groups of an f-string literal."""
  i, n = 0, len(lit)
  while i < n:
    if lit.startswith("{{", i) or lit.startswith("}}", i):
      i += 2
      continue
    if lit[i] == "{":
      depth, j = 1, i + 1
      while j < n and depth:
        depth += {"{": 1, "}": -1}.get(lit[j], 0)
        j += 1
      if depth:
        return
      yield i, j, lit[i + 1 : j - 1]
      i = j
      continue
    i += 1


def _bound_names(code: str) -> set[str] | None:
  try:
    tree = ast.parse(code)
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    return None
  names = set(dir(builtins))
  for node in ast.walk(tree):
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
      names.add(node.id)
    elif isinstance(node, ast.arg):
      names.add(node.arg)
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
      names.add(node.name)
    elif isinstance(node, ast.alias):
      names.add((node.asname or node.name).partition(".")[0])
    elif isinstance(node, ast.ExceptHandler) and node.name:
      names.add(node.name)
    elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
      names.add(node.name)
  return names


def _repair_pass(code: str, should_escape) -> tuple[str, list[str]]:
  edits, notes = [], []
  for start, end in _fstring_spans(code):
    lit = code[start:end]
    for gs, ge, content in _brace_groups(lit):
      if should_escape(content):
        edits.append((start + gs, start + ge, "{{" + content + "}}"))
        line = code.count("\n", 0, start + gs) + 1
        notes.append(f"line {line}: escaped {{{content}}} in an f-string")
  for s, e, new in sorted(edits, reverse=True):
    code = code[:s] + new + code[e:]
  return code, notes


def repair_fstrings(code: str) -> tuple[str, list[str]]:
  """Escapes f-string placeholders that can only fail, as the reference repairs LLM code.

  Pass 1: empty `{}` and multi-word `{your answer}` (syntax errors). Pass 2 (if the code then
  parses): `{word}` where `word` is bound nowhere in the module (a certain NameError), e.g.
  `f"Answer as \\boxed{answer}"`.
  """
  code, notes = _repair_pass(
    code,
    lambda c: not c.strip() or (_WORDS.fullmatch(c.strip()) is not None and " " in c.strip()),
  )
  bound = _bound_names(code)
  if bound is not None:

    def unbound(c: str) -> bool:
      m = _IDENT.fullmatch(c)
      return m is not None and m.group(1) not in bound

    code, more = _repair_pass(code, unbound)
    notes += more
  return code, notes


# -- the sandboxed stages -------------------------------------------------------------------


def dependence_failure(solutions: dict, observations: dict) -> str | None:
  """The dependence stage's verdict: None, or why the answer does not depend on the task.

  Fails exactly when `solutions` (per seed, stripped) hold one value while `observations` (the
  first observation per seed) hold at least two: every task shown gets the same answer, as when
  `solution()` returns a constant and `step()` compares with `solution()` ("self-consistent
  but wrong"). Callers probe enough seeds that a small but real answer space (yes/no) differs
  somewhere."""
  answers = {str(a).strip() for a in solutions.values()}
  shown = set(observations.values())
  if len(answers) != 1 or len(shown) < 2:
    return None
  (answer,) = answers
  return (
    f"the solution is {answer[:60]!r} on all {len(solutions)} probed seeds while the first "
    f"observation varies ({len(shown)} distinct): the answer does not depend on the task"
  )


def game_stages(run: ValidationRun, source: str, class_name: str) -> None:
  """The sandboxed stages of a game (load .. leak); raises StageFailure."""
  cfg = run.config
  seeds = list(cfg.seeds)
  run.begin("load")
  env = run.make(source, class_name)
  run.end()

  run.begin("contract")
  run.call(env, "reset", seeds[0])
  for action in cfg.junk_actions:
    _, _, terminated, truncated, _ = run.call(env, "step", action)
    if terminated or truncated:
      run.call(env, "reset", seeds[0])
  run.call(env, "solution")
  run.end()

  run.begin("feasibility")
  first = {}
  for s in seeds:
    obs, _ = run.call(env, "reset", s)
    sol = run.call(env, "solution")
    first[s] = (obs, sol)
    answer = f"\\boxed{{{sol}}}"
    _, reward, terminated, _, _ = run.call(env, "step", answer)
    if reward != 1.0 or not terminated:
      raise run.fail(
        f"seed {s}: answering {answer[:80]} after reset gave reward {reward:g} and "
        f"terminated={terminated} (need reward 1.0 and terminated=True)",
      )
  run.end()

  run.begin("dependence")
  observations = {s: first[s][0] for s in seeds}
  solutions = {s: first[s][1] for s in seeds}
  extra = max(seeds) + 1
  while len(set(solutions.values())) == 1 and len(solutions) < cfg.dependence_seeds:
    observations[extra], _ = run.call(env, "reset", extra)
    solutions[extra] = run.call(env, "solution")
    extra += 1
  why = dependence_failure(solutions, observations)
  if why is not None:
    raise run.fail(why)
  run.end()

  run.begin("determinism")
  fresh = run.make(source, class_name)
  for who, inst in (("a fresh instance", fresh), ("the same instance re-reset", env)):
    for s in seeds:
      obs, _ = run.call(inst, "reset", s)
      sol = run.call(inst, "solution")
      if obs != first[s][0]:
        raise run.fail(f"seed {s}: {who} gave a different first observation")
      if sol != first[s][1]:
        raise run.fail(f"seed {s}: {who} gave a different solution")
  run.end()

  run.begin("leak")
  why = leak_failure(
    seeds, {s: first[s][1] for s in seeds}, {s: first[s][0] for s in seeds}, "the solution"
  )
  if why is not None:
    raise run.fail(why)
  run.end()


def validate(text: str, config: ValidatorConfig | None = None) -> ValidationReport:
  """Runs every stage on designer output `text` (a model response or a plain source)."""
  config = config or ValidatorConfig()
  timings: dict[str, float] = {}
  t0 = time.perf_counter()
  report = ValidationReport(False, "extract", "", timings, list(config.seeds), "")
  source = extract_code(text)
  source, report.repairs = repair_fstrings(source)
  report.source = source
  timings["extract"] = time.perf_counter() - t0
  if not source.strip():
    report.reason = "no code found in the text"
    return report
  t = time.perf_counter()
  issue, class_name, report.kind = sandbox_policy.check_source_kind(source)
  timings["static"] = time.perf_counter() - t
  if issue is not None:
    report.stage, report.reason = "static", str(issue)
    return report
  report.class_name = class_name
  if not config.seeds:
    raise ValueError("ValidatorConfig.seeds must not be empty")
  run = ValidationRun(config, timings)
  stages = tool_stages if report.kind == "tool" else game_stages
  try:
    stages(run, source, class_name)
    report.valid, report.stage = True, "ok"
  except StageFailure as f:
    run.end()
    report.stage, report.reason = f.stage, f.reason
  finally:
    report.sandbox_layers = run.layers()
    run.close()
    timings["total"] = time.perf_counter() - t0
  return report
