"""What a SPADE run's designer wrote and what became of it, read from the run directory.

``python -m spade_jax.spade.run_report RUN [--examples N] [--out FILE]`` prints markdown:

* the model-written environments (``RUN/envs/step*_game*_attempt*.json``, the designer's verdict
  records; library seeds are not counted): how many were sampled, where each failed first
  (the validator's stages), how many passed, were translated for the device (and the
  translator's refusals), were trained on, and earned non-zero regret;
* one row per iteration of ``RUN/metrics.jsonl``: designer attempts and passes, the pool's
  source, solve rates with and without the hint, regret, and the time of each phase;
* the passed environments, each with its verdict, and the sources of the first ``N``; when fewer
  than ``N`` passed, the failed samples that got furthest (`furthest_failures`: latest stage
  reached, then finished within the budget, then the latest step) with their verdicts and
  sources, so a report shows what the model wrote whatever the numbers are.

It reads files only (no model, no sandbox), so it works on a run still in progress.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spade_jax.metrics import read_metrics
from spade_jax.spade import observe

PHASES = (  # (column, metric key)
  ("designer", "perf/designer_generate_s"),
  ("validate", "perf/validate_s"),
  ("hints", "perf/hint_s"),
  ("translate", "perf/translate_s"),
  ("rollout device", "perf/rollout_device_s"),
  ("rollout host", "perf/rollout_host_s"),
  ("update", "perf/update_s"),
  ("eval", "perf/eval_s"),
  ("step", "perf/step_s"),
)


def environment_records(run: Path) -> list[dict]:
  """The verdicts of the model-written environments, in (step, game, attempt) order; each
  with ``file`` (its source's file name) added."""
  out = []
  for path in sorted((Path(run) / "envs").glob("step*_game*_attempt*.json")):
    try:
      record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
      continue  # a record being written
    record["file"] = path.with_suffix(".py").name
    out.append(record)
  return out


def metric_rows(run: Path) -> list[dict]:
  """The rows of ``metrics.jsonl`` (a torn last line dropped)."""
  path = Path(run) / "metrics.jsonl"
  return read_metrics(path) if path.exists() else []


def summary(records: list[dict]) -> dict:
  """Counts over the model-written environments."""
  stages: dict[str, int] = {}
  for r in records:
    stages[r.get("stage", "?")] = stages.get(r.get("stage", "?"), 0) + 1
  passed = [r for r in records if r.get("valid")]
  refusals: dict[str, int] = {}
  for r in passed:
    if not r.get("translated"):
      reason = str(r.get("translation_reason", "not attempted"))
      refusals[reason] = refusals.get(reason, 0) + 1
  trained = [r for r in passed if "regret" in r]
  return {
    "samples": len(records),
    "finished": sum(bool(r.get("finished")) for r in records),
    "stages": stages,
    "passed": len(passed),
    "translated": sum(bool(r.get("translated")) for r in passed),
    "refusals": refusals,
    "trained": len(trained),
    "nonzero_regret": sum(abs(float(r["regret"])) > 0 for r in trained),
  }


def _fmt(x) -> str:
  if x is None:
    return "-"
  return f"{x:.3g}" if isinstance(x, float) else str(x)


def iteration_table(rows: list[dict]) -> str:
  head = ["step", "attempts", "passed", "pool", "solve", "solve (hint)", "regret"]
  head += [name for name, _ in PHASES]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for row in rows:
    cells = [
      row.get("step"),
      row.get("designer/attempts"),
      row.get("designer/passed"),
      observe.SOURCES.get(row.get("agent/pool_source"), "-"),
      row.get("agent/solve_rate"),
      row.get("agent/solve_rate_hint"),
      row.get("designer/regret_mean"),
    ]
    for _, key in PHASES:
      cells.append(round(row[key]) if key in row else None)
    lines.append("| " + " | ".join(_fmt(c) for c in cells) + " |")
  return "\n".join(lines)


def furthest_failures(records: list[dict], n: int) -> list[dict]:
  """The ``n`` failed samples that reached the latest validation stage (`observe.DESIGNER_STAGES`
  order), those that finished within the token budget first, then the latest step first."""
  order = {stage: k for k, stage in enumerate(observe.DESIGNER_STAGES)}
  failed = [r for r in records if not r.get("valid")]
  key = lambda r: (  # noqa: E731
    -order.get(r.get("stage"), -1),
    not r.get("finished"),
    -int(r.get("gen_step") or 0),
    r["file"],
  )
  return sorted(failed, key=key)[:n]


def _source_block(run: Path, record: dict) -> list[str]:
  src = run / "envs" / record["file"]
  text = src.read_text() if src.exists() else record.get("source", "")
  return ["", f"### `{record['file']}`", "", "```python", text.strip("`\n"), "```"]


def report(run: Path, examples: int = 3) -> str:
  run = Path(run)
  records = environment_records(run)
  s = summary(records)
  stages = ", ".join(f"{k} {v}" for k, v in sorted(s["stages"].items(), key=lambda kv: -kv[1]))
  out = [
    f"# Run report: {run}",
    "",
    f"Model-written environments: {s['samples']} sampled ({s['finished']} finished within the "
    f"token budget); first failing stage: {stages or 'none'}.",
    f"Passed validation: {s['passed']}; translated for the device: {s['translated']}; trained "
    f"on (their epoch's regret computed): {s['trained']}; non-zero regret: {s['nonzero_regret']}.",
  ]
  if s["refusals"]:
    out.append("Translator refusals: " + "; ".join(f"{k} ({v})" for k, v in s["refusals"].items()))
  rows = metric_rows(run)
  if rows:
    out += ["", "## Iterations (seconds per phase)", "", iteration_table(rows)]
  passed = [r for r in records if r.get("valid")]
  if passed:
    out += ["", "## Environments that passed validation", ""]
    for r in passed:
      out.append(
        f"* `{r['file']}` ({r.get('skill')}, step {r.get('gen_step')}, attempt "
        f"{r.get('attempt')}): class {r.get('class_name')}; translated "
        f"{bool(r.get('translated'))} ({r.get('translation_reason', '-')}); regret "
        f"{_fmt(r.get('regret'))}, win rate {_fmt(r.get('win_rate'))}; hint: "
        f"{r.get('hint', '-')!r}"
      )
    for r in passed[:examples]:
      out += _source_block(run, r)
  failures = furthest_failures(records, examples - min(examples, len(passed)))
  if failures:
    out += ["", "## Failed samples that got furthest", ""]
    for r in failures:
      out.append(
        f"* `{r['file']}` (step {r.get('gen_step', '-')}, attempt {r.get('attempt', '-')}, "
        f"{r.get('response_tokens', '-')} tokens, finished {bool(r.get('finished'))}): failed "
        f"at `{r.get('stage')}`: {r.get('reason', '-')}"
      )
    for r in failures:
      out += _source_block(run, r)
  return "\n".join(out) + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("run", help="the run directory (--workdir of experiments/run.py)")
  p.add_argument("--examples", type=int, default=3, help="sources of the first N passed envs")
  p.add_argument("--out", default="", help="write the report here too")
  args = p.parse_args(argv)
  run = Path(args.run)
  if not (run / "envs").is_dir() and not (run / "metrics.jsonl").exists():
    print(f"run_report: {run} is not a run directory (no envs/ or metrics.jsonl)", file=sys.stderr)
    return 2
  text = report(run, args.examples)
  if args.out:
    Path(args.out).write_text(text)
  print(text, end="")
  return 0


if __name__ == "__main__":
  sys.exit(main())
