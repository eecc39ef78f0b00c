"""Translator corpus: run the translator on every environment of tests/fixtures/translate_corpus/
(issue 25) and the differential check on each translated one.

  python benchmarks/translate_corpus.py [--seeds 16] [--tokenizer PATH] [--no-validate] [--json]
                                        [FILE ...]

For each fixture: Python validation (`envs.sandbox.validate`, skipped with --no-validate), then
`translate_and_check` (the translation is accepted only if the interpreter agrees with the
sandboxed original on ``--seeds`` seeds x the check's scripts). Verdicts:

* ``translated``    lowered and passed the differential check;
* ``refused``       a clean refusal (``line N: <construct> ...``; the line is reported);
* ``check_failed``  lowered, but the differential check found a disagreement (or could not run):
                    the translation is rejected, which is the check doing its job;
* ``crash``         the translator raised something that is not a refusal (a bug);
* ``invalid``       the fixture itself failed Python validation (a corpus bug).

Prints the translation rate, the crash count, a histogram of refusal reasons normalised (line
numbers, code excerpts, regexes and numbers elided) and one line per file. ``--json`` prints the
same as one JSON object. Programs are tokenizer-specific; the default tokenizer is the
translator's (``translate.pipeline.resolve_tokenizer``).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "translate_corpus"
VERDICTS = ("translated", "refused", "check_failed", "crash", "invalid")
_LINE = re.compile(r"^line (\d+): (.*)$", re.DOTALL)


def corpus_files() -> list[Path]:
  return sorted(CORPUS.glob("c*.py"))


def normalise(reason: str) -> str:
  """A refusal reason with its specifics elided, so that reasons of one kind count together:
  ``line 15: `rng.sample(range(1, 60), 5)`: a population of 59 values exceeds ...`` ->
  ```...`: a population of N values exceeds ...``."""
  m = _LINE.match(reason)
  text = m.group(2) if m else reason
  text = re.sub(r"`[^`]*(`|$)", "`...`", text, flags=re.DOTALL)
  text = re.sub(r"'(?:[^'\\]|\\.)*'", "'...'", text)
  text = re.sub(r"\[-?\d+, -?\d+\]", "[N, N]", text)
  text = re.sub(r"(?<![\w.])-?\d+", "N", text)
  text = re.sub(r"\s+", " ", text).strip()
  return text[:110]


def judge(path: Path, *, tokenizer, seeds: int, pool, validate: bool = True) -> dict:
  """The verdict on one fixture: ``{"file", "verdict", "line", "reason", "seconds", ...}``."""
  from spade_jax.envs.sandbox.validate import ValidatorConfig
  from spade_jax.envs.sandbox.validate import validate as validate_source
  from spade_jax.envs.translate.pipeline import translate_and_check

  source = path.read_text()
  t0 = time.perf_counter()
  rec = {"file": path.name, "verdict": "", "line": None, "reason": "", "checked_episodes": 0}
  if validate:
    report = validate_source(source, ValidatorConfig())
    if not report.valid:
      rec.update(verdict="invalid", reason=f"{report.stage}: {report.reason}")
      rec["seconds"] = round(time.perf_counter() - t0, 3)
      return rec
  try:
    out = translate_and_check(source, None, tokenizer=tokenizer, seeds=seeds, pool=pool)
  except Exception as e:  # noqa: BLE001 - a crash is what this script counts
    rec.update(verdict="crash", reason=f"{type(e).__name__}: {e}")
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec
  reason = out.get("translation_reason", "")
  rec["checked_episodes"] = out.get("checked_episodes", 0)
  if out["translated"]:
    rec["verdict"] = "translated"
    rec["answer_parse"] = out.get("answer_parse", "")
  elif reason.startswith("differential check"):
    rec.update(verdict="check_failed", reason=reason)
  else:
    m = _LINE.match(reason)
    rec.update(verdict="refused", reason=reason, line=int(m.group(1)) if m else None)
  rec["seconds"] = round(time.perf_counter() - t0, 3)
  return rec


def summarise(records: list[dict]) -> dict:
  """Counts, the translation rate, and the normalised refusal histogram (most common first)."""
  counts = collections.Counter(r["verdict"] for r in records)
  hist = collections.Counter(normalise(r["reason"]) for r in records if r["verdict"] == "refused")
  crashes = collections.Counter(
    r["reason"].split(":")[0] for r in records if r["verdict"] == "crash"
  )
  n = len(records)
  return {
    "fixtures": n,
    **{v: counts.get(v, 0) for v in VERDICTS},
    "translation_rate": round(counts.get("translated", 0) / max(n, 1), 4),
    "refusals_without_line": sum(r["verdict"] == "refused" and r["line"] is None for r in records),
    "crash_types": dict(crashes.most_common()),
    "refusal_histogram": dict(hist.most_common()),
  }


def run(paths: list[Path], *, tokenizer=None, seeds: int = 16, validate: bool = True) -> dict:
  """Judges every path with one shared sandbox pool -> ``{"summary", "files", "tokenizer"}``."""
  from spade_jax.envs.sandbox.pool import SandboxPool
  from spade_jax.envs.translate.pipeline import resolve_tokenizer

  tok, name = resolve_tokenizer(tokenizer)
  t0 = time.perf_counter()
  with SandboxPool(2) as pool:
    records = [judge(p, tokenizer=tok, seeds=seeds, pool=pool, validate=validate) for p in paths]
  return {
    "summary": summarise(records),
    "files": records,
    "tokenizer": name,
    "seeds": seeds,
    "seconds": round(time.perf_counter() - t0, 2),
  }


def report_text(result: dict) -> str:
  s = result["summary"]
  lines = [
    f"fixtures {s['fixtures']}  translated {s['translated']} "
    f"({100 * s['translation_rate']:.1f}%)  refused {s['refused']}  "
    f"check_failed {s['check_failed']}  crashes {s['crash']}  invalid {s['invalid']}  "
    f"(tokenizer {result['tokenizer']}, {result['seeds']} seeds, {result['seconds']} s)",
  ]
  if s["crash_types"]:
    lines.append("crashes: " + ", ".join(f"{k} x{v}" for k, v in s["crash_types"].items()))
  lines.append("refusal reasons (normalised):")
  lines += [f"  {n:3d}  {reason}" for reason, n in s["refusal_histogram"].items()]
  lines.append("per file:")
  for r in result["files"]:
    where = f"line {r['line']}" if r["line"] is not None else "-"
    why = r["reason"].replace("\n", " ")
    m = _LINE.match(why)
    why = m.group(2) if m else why
    lines.append(f"  {r['file']:32s} {r['verdict']:12s} {where:8s} {why[:140]}")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("files", nargs="*", type=Path, help="fixtures (default: the whole corpus)")
  p.add_argument("--seeds", type=int, default=16, help="differential-check seeds per fixture")
  p.add_argument("--tokenizer", default=None, help="tokenizer path (default: the translator's)")
  p.add_argument("--no-validate", action="store_true", help="skip Python validation")
  p.add_argument("--json", action="store_true", help="print one JSON object")
  args = p.parse_args(argv)
  result = run(
    args.files or corpus_files(),
    tokenizer=args.tokenizer,
    seeds=args.seeds,
    validate=not args.no_validate,
  )
  print(json.dumps(result, indent=1) if args.json else report_text(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
