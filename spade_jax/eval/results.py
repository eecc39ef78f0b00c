"""Evaluation records on disk, avg@k with standard errors, and the markdown tables.

Layout: ``<out>/<suite>.jsonl`` holds one JSON line per episode (`players.Episode.record`:
prompt id, category, sample index, score, the whole transcript, the grader's verdict), appended
as episodes finish, so an interrupted evaluation resumes by skipping the ``(prompt_id, sample)``
pairs already there (a torn last line is dropped); ``<out>/summary.json`` holds the numbers.

avg@k: each prompt's score is the mean of its k samples; a category's number is the mean over
its prompts, with the standard error of that mean over prompts (samples of one prompt are not
independent, so they are averaged first). A suite's ``overall`` is the unweighted mean of its
categories (as BFCL and the paper's Reasoning-Gym buckets report), with the standard error
``sqrt(sum se^2) / C``. Paired comparisons (`paired_difference`) match prompts by id.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from spade_jax import multihost

Key = tuple[str, int]  # (prompt id, sample index)


def read_records(path: Path) -> dict[Key, dict]:
  """The records of a suite file by (prompt id, sample); a torn or garbled line is dropped
  (and the file rewritten without it, so appends stay line-aligned; by process 0 alone in a
  multi-process run)."""
  if not path.exists():
    return {}
  out: dict[Key, dict] = {}
  good: list[str] = []
  text = path.read_text(encoding="utf-8")
  torn = bool(text) and not text.endswith("\n")  # a write cut before its newline
  for line in text.splitlines():
    try:
      rec = json.loads(line)
      key = (str(rec["prompt_id"]), int(rec["sample"]))
    except (ValueError, KeyError, TypeError):
      torn = True
      continue
    out[key] = rec
    good.append(line)
  if torn and multihost.is_writer():
    path.write_text("".join(g + "\n" for g in good), encoding="utf-8")
  return out


def append_records(path: Path, records: Iterable[dict]) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  with path.open("a", encoding="utf-8") as f:
    for r in records:
      f.write(json.dumps(r, ensure_ascii=False) + "\n")
    f.flush()


def mean_se(values: Sequence[float]) -> tuple[float, float]:
  """Mean and its standard error (0 with fewer than two values)."""
  n = len(values)
  if n == 0:
    return float("nan"), float("nan")
  m = sum(values) / n
  if n < 2:
    return m, 0.0
  var = sum((v - m) ** 2 for v in values) / (n - 1)
  return m, math.sqrt(var / n)


def prompt_means(records: Iterable[dict]) -> dict[str, tuple[str, float, int]]:
  """prompt id -> (category, mean score over its samples, number of samples)."""
  acc: dict[str, list] = {}
  for r in records:
    e = acc.setdefault(r["prompt_id"], [r["category"], 0.0, 0])
    e[1] += float(r["score"])
    e[2] += 1
  return {pid: (c, s / n, n) for pid, (c, s, n) in acc.items()}


def summarize(records: Sequence[dict], categories: Sequence[str] | None = None) -> dict:
  """``{"categories": {cat: {mean, se, prompts}}, "overall": {mean, se}, "k": k,
  "episodes": n, "errors": n}`` over ``records`` (one suite); ``categories`` fixes the order (default: as
  first seen)."""
  by_cat: dict[str, list[float]] = defaultdict(list)
  ks = set()
  for _, (cat, mean, n) in prompt_means(records).items():
    by_cat[cat].append(mean)
    ks.add(n)
  order = [c for c in (categories or []) if c in by_cat] + [
    c for c in by_cat if c not in (categories or [])
  ]
  cats = {}
  for c in order:
    m, se = mean_se(by_cat[c])
    cats[c] = {"mean": m, "se": se, "prompts": len(by_cat[c])}
  overall = {"mean": float("nan"), "se": float("nan")}
  if cats:
    overall = {
      "mean": sum(v["mean"] for v in cats.values()) / len(cats),
      "se": math.sqrt(sum(v["se"] ** 2 for v in cats.values())) / len(cats),
    }
  return {
    "categories": cats,
    "overall": overall,
    "k": max(ks) if ks else 0,
    "episodes": len(records),
    "errors": sum(1 for r in records if r.get("error")),
  }


def _pct(m: float, se: float) -> str:
  if math.isnan(m):
    return "n/a"
  return f"{100 * m:.1f} ± {100 * se:.1f}"


def table(summary: dict[str, dict]) -> str:
  """Markdown: one row per (suite, category) plus each suite's overall; avg@k in percent with
  its standard error, prompts, samples per prompt."""
  lines = [
    "| suite | category | metric | avg@k (%) ± SE | prompts | k |",
    "|---|---|---|---|---|---|",
  ]
  for suite, s in summary.items():
    metric = s.get("metric", "accuracy")
    for cat, v in s["categories"].items():
      lines.append(
        f"| {suite} | {cat} | {metric} | {_pct(v['mean'], v['se'])} | {v['prompts']} | {s['k']} |"
      )
    if len(s["categories"]) > 1:
      o = s["overall"]
      n = sum(v["prompts"] for v in s["categories"].values())
      lines.append(
        f"| {suite} | **overall** | {metric} | {_pct(o['mean'], o['se'])} | {n} | {s['k']} |"
      )
  return "\n".join(lines)


def paired_difference(a: Sequence[dict], b: Sequence[dict]) -> dict:
  """Per category and overall: mean of A, mean of B, and B - A with its paired standard error
  (over the prompts both runs scored, matched by prompt id)."""
  pa, pb = prompt_means(a), prompt_means(b)
  by_cat: dict[str, list[tuple[float, float]]] = defaultdict(list)
  for pid in pa.keys() & pb.keys():
    by_cat[pa[pid][0]].append((pa[pid][1], pb[pid][1]))
  cats = {}
  for c in sorted(by_cat):
    xs = by_cat[c]
    d, se = mean_se([y - x for x, y in xs])
    cats[c] = {
      "a": sum(x for x, _ in xs) / len(xs),
      "b": sum(y for _, y in xs) / len(xs),
      "diff": d,
      "se": se,
      "prompts": len(xs),
    }
  out = {"categories": cats}
  if cats:
    out["overall"] = {
      "a": sum(v["a"] for v in cats.values()) / len(cats),
      "b": sum(v["b"] for v in cats.values()) / len(cats),
      "diff": sum(v["diff"] for v in cats.values()) / len(cats),
      "se": math.sqrt(sum(v["se"] ** 2 for v in cats.values())) / len(cats),
      "prompts": sum(v["prompts"] for v in cats.values()),
    }
  return out


def comparison_table(diffs: dict[str, dict], name_a: str, name_b: str) -> str:
  """Markdown of `paired_difference` results for several suites: A, B, B - A ± paired SE."""
  lines = [
    f"| suite | category | {name_a} (%) | {name_b} (%) | {name_b} − {name_a} (pp) ± SE | prompts |",
    "|---|---|---|---|---|---|",
  ]
  for suite, d in diffs.items():
    rows = list(d["categories"].items())
    if len(rows) > 1 and "overall" in d:
      rows.append(("**overall**", d["overall"]))
    for cat, v in rows:
      lines.append(
        f"| {suite} | {cat} | {100 * v['a']:.1f} | {100 * v['b']:.1f} | "
        f"{100 * v['diff']:+.1f} ± {100 * v['se']:.1f} | {v['prompts']} |"
      )
  return "\n".join(lines)
