"""`python -m spade_jax.envs.check FILE --json [--tokenizer PATH] [--seeds N]`
(docs/DESIGN.md §3.4).

Validates an environment file (a Python source or a model response containing one; a game or a
tool environment, see sandbox/validate.py) and, when it is a valid game, hands it to the
translator for lowering to an `EnvProgram` with differential checking. Tool environments are
never translated (`"translated": false`, `"translation_reason": "tool environments run on the
host"`). Prints one JSON object (`--json`) or a short human-readable summary. Exit status: 0
valid, 1 invalid, 2 usage error (missing/unreadable file, bad arguments). The file is only
read and parsed here; it executes exclusively in sandboxed worker processes.

JSON keys: valid, stage ("ok" or the first failing stage), reason, kind ("game" or "tool"),
translated, translation_reason, checked_episodes, timings (seconds per stage), class_name,
repairs, validation_seeds, sandbox_layers, file.

Translation seam: if the module `spade_jax.envs.translate.pipeline` exists, its
`translate_and_check(source, report, tokenizer=None, seeds=64)` is called with the extracted
source, the `ValidationReport`, the `--tokenizer` path (or None) and `--seeds`; it returns a
dict with at least `translated`, `translation_reason` and `checked_episodes`, merged into the
output (a "translate" entry in its "timings" is merged into ours). Without that module the
output says `"translated": false, "translation_reason": "translator not available"`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

from spade_jax.envs.sandbox.pool import SandboxConfig
from spade_jax.envs.sandbox.validate import ValidationReport, ValidatorConfig, validate

TRANSLATOR_MODULE = "spade_jax.envs.translate.pipeline"
TOOL_NOT_TRANSLATED = "tool environments run on the host"


def translate(source: str, report: ValidationReport, tokenizer: str | None, seeds: int) -> dict:
  """Calls the translator if it is installed in the package; otherwise says it is not."""
  try:
    module = importlib.import_module(TRANSLATOR_MODULE)
  except ModuleNotFoundError as e:
    if e.name != TRANSLATOR_MODULE:
      raise
    return {
      "translated": False,
      "translation_reason": "translator not available",
      "checked_episodes": 0,
    }
  try:
    return dict(module.translate_and_check(source, report, tokenizer=tokenizer, seeds=seeds))
  except Exception as e:  # noqa: BLE001 - the output schema must hold whatever the translator does
    return {
      "translated": False,
      "translation_reason": f"translator failed: {type(e).__name__}: {e}",
      "checked_episodes": 0,
    }


def _positive(kind):
  def parse(text: str):
    value = kind(text)
    if value <= 0:
      raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value

  return parse


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="python -m spade_jax.envs.check",
    description="Validate (and translate) a designer-written environment in the sandbox.",
  )
  p.add_argument("file", help="environment source (.py) or a model response containing one")
  p.add_argument("--json", action="store_true", help="print one JSON object")
  p.add_argument("--tokenizer", help="tokenizer path for the translator's text check")
  p.add_argument("--seeds", type=_positive(int), default=64, help="differential-check seeds")
  p.add_argument(
    "--validation-seeds", type=_positive(int), default=8, help="seeds for validation stages"
  )
  p.add_argument("--timeout", type=_positive(float), default=60.0, help="total validation s")
  p.add_argument("--call-timeout", type=_positive(float), default=30.0, help="per call s")
  return p


def _usage_error(msg: str) -> int:
  print(f"error: {msg}", file=sys.stderr)
  return 2


def _summary(out: dict) -> str:
  verdict = "VALID" if out["valid"] else f"INVALID at stage '{out['stage']}': {out['reason']}"
  lines = [f"{out['file']}: {verdict}", f"  kind: {out['kind']}"]
  if out.get("class_name"):
    lines.append(f"  class: {out['class_name']}")
  for note in out.get("repairs", []):
    lines.append(f"  repair: {note}")
  if out["translated"]:
    lines.append(f"  translated: yes ({out['checked_episodes']} episodes checked)")
  else:
    lines.append(f"  translated: no ({out['translation_reason']})")
  t = ", ".join(f"{k} {v:.3f}s" for k, v in out["timings"].items())
  lines.append(f"  timings: {t}")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  try:
    args = _parser().parse_args(argv)
  except SystemExit as e:  # argparse: 0 for --help, 2 for bad arguments
    return int(e.code or 0)
  if not os.path.isfile(args.file):
    return _usage_error(f"no such file: {args.file}")
  if args.tokenizer is not None and not os.path.exists(args.tokenizer):
    return _usage_error(f"no such tokenizer path: {args.tokenizer}")
  try:
    with open(args.file, encoding="utf-8") as f:
      text = f.read()
  except (OSError, UnicodeDecodeError) as e:
    return _usage_error(f"cannot read {args.file}: {e}")
  sandbox = SandboxConfig(load_timeout=args.call_timeout, call_timeout=args.call_timeout)
  config = ValidatorConfig(
    seeds=tuple(range(args.validation_seeds)), total_timeout=args.timeout, sandbox=sandbox
  )
  report = validate(text, config)
  out = {
    "file": args.file,
    "valid": report.valid,
    "stage": report.stage,
    "reason": report.reason,
    "kind": report.kind,
    "translated": False,
    "translation_reason": "not attempted: validation failed",
    "checked_episodes": 0,
    "timings": dict(report.timings),
    "class_name": report.class_name,
    "repairs": report.repairs,
    "validation_seeds": report.seeds,
    "sandbox_layers": report.sandbox_layers,
  }
  if report.kind == "tool":
    out["translation_reason"] = TOOL_NOT_TRANSLATED
  elif report.valid:
    t = time.perf_counter()
    result = translate(report.source, report, args.tokenizer, args.seeds)
    result.pop("program", None)  # the EnvProgram itself is not JSON
    timings = result.pop("timings", {}) or {}
    out.update(result)
    out["timings"].update(timings)
    out["timings"].setdefault("translate", time.perf_counter() - t)
  print(json.dumps(out) if args.json else _summary(out))
  return 0 if report.valid else 1


if __name__ == "__main__":
  sys.exit(main())
