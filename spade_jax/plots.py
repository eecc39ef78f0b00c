"""Training curves from ``metrics.jsonl`` (matplotlib, headless): regret and solve rates with
and without the hint, designer validity / translation, difficulty, held-out evaluation."""

from __future__ import annotations

from pathlib import Path

PANELS = {
  "regret_and_solve_rates.png": (
    "Regret and solve rates",
    ["designer/regret_mean", "agent/solve_rate", "agent/solve_rate_hint"],
  ),
  "designer_validity.png": (
    "Designer validity",
    [
      "designer/valid_rate",
      "designer/attempt_valid_rate",
      "designer/translated_rate",
      "designer/infeasible_rate",
    ],
  ),
  "difficulty.png": (
    "Difficulty (unhinted failure rate of each new pool; _ref: for the frozen warm policy)",
    ["designer/difficulty", "designer/difficulty_ref", "designer/pool_win_rate"],
  ),
  "heldout_eval.png": (
    "Held-out evaluation",
    [
      "eval/accuracy",
      "eval/math",
      "eval/algorithmic",
      "eval/logic",
      "eval/cognition",
      "eval/unseen_levels",
      "eval/unseen_families",
    ],
  ),
  "training.png": ("Update", ["train/loss", "train/grad_norm", "train/clip_frac"]),
}


def write_plots(records: list[dict], out_dir: str | Path) -> list[Path]:
  """One PNG per panel with whatever series the records hold; returns the files written."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  written = []
  for fname, (title, keys) in PANELS.items():
    fig, ax = plt.subplots(figsize=(6, 3.5))
    drawn = 0
    for key in keys:
      pts = [(r["step"], r[key]) for r in records if r.get(key) is not None]
      if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", markersize=3, label=key)
        drawn += 1
    ax.set_title(title)
    ax.set_xlabel("step")
    if drawn:
      ax.legend(fontsize=7)
    else:
      ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(out / fname, dpi=80)
    plt.close(fig)
    written.append(out / fname)
  return written
