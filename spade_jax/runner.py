"""The run skeleton both training loops share (`spade_jax.train`, `spade_jax.tiny.train`).

A run lives in one workdir:

* ``config.json``: the run's config; a resumed run must match it except in `RESUMABLE_CHANGES`
  (`check_resume_config`), else `UserError`;
* ``checkpoints/``: device tree + host JSON per saved step (`checkpoint.Checkpointer`); the host
  side always holds ``next_step``, the step a resumed run starts at;
* ``metrics.jsonl`` (and ``tb/``): one row per step (`metrics.MetricsWriter`); on resume the
  rows of steps a killed run logged after its last checkpoint are dropped (`truncate_metrics`);
* ``plots/``: the curves of `spade_jax.plots`, every ``plot_every`` steps and at the end;
* the loops' own subdirectories (``envs/``, ``eval/``, ``transcripts/``), made here.

In a multi-process run (`spade_jax.multihost`) every process runs the loop and reads the
workdir, which must be one directory all processes see; process 0 alone writes ``config.json``,
the metrics and the plots (the loops likewise write their records only there), while every
process takes part in each checkpoint save (orbax writes every shard once).

`Run` owns these (and the progress bar) for one call of a training loop: it opens them, restores
the latest checkpoint, logs, saves and plots per step, and closes everything in `close` (a
``with`` block). The loops keep everything that is theirs: what a step computes and what the
host side of a checkpoint holds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from spade_jax import checkpoint, metrics, multihost, plots


class UserError(Exception):
  """A problem with the user's input (paths, checkpoints, config): one line, exit 2."""


# Config fields that may change between a run and its resumption.
RESUMABLE_CHANGES = (
  "steps",
  "compile_ahead",
  "checkpoint_every",
  "keep_checkpoints",
  "plot_every",
  "progress",
  "eval",
  "transcripts_per_step",
  "wandb_project",
)


def config_json(config) -> dict:
  """The config as written to ``config.json`` (and given to wandb)."""
  return json.loads(config.to_json_best_effort())


_MISSING = object()


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
  out: dict[str, Any] = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def config_differences(old: dict, new: dict, defaults: dict | None = None) -> list[str]:
  """Dotted paths where the config ``new`` differs from the stored ``old`` outside
  `RESUMABLE_CHANGES`. A field ``old`` lacks (added to the code after the run started) is no
  difference when ``new`` holds its default (``defaults``, the front end's base config): the
  run went on without it, which is what the default reproduces."""
  flat_old, flat_new = _flatten(old), _flatten(new)
  flat_defaults = _flatten(defaults) if defaults else {}
  diff = []
  for key in sorted(set(flat_old) | set(flat_new)):
    if key.split(".")[0] in RESUMABLE_CHANGES:
      continue
    was, now = flat_old.get(key, _MISSING), flat_new.get(key, _MISSING)
    if was == now:
      continue
    if was is _MISSING and now == flat_defaults.get(key, _MISSING):
      continue
    diff.append(key)
  return diff


def check_resume_config(workdir: Path, config, defaults=None) -> None:
  """Raises `UserError` if ``workdir`` holds a run whose config differs from ``config`` in a
  field outside `RESUMABLE_CHANGES` (`config_differences`; ``defaults`` is the front end's base
  config, so fields added to the code since the run started resume at their defaults); then
  (re)writes ``workdir/config.json`` (process 0 only, atomically: the others may be reading
  it)."""
  path = Path(workdir) / "config.json"
  new = config_json(config)
  if path.exists():
    old = json.loads(path.read_text())
    diff = config_differences(old, new, config_json(defaults) if defaults is not None else None)
    if diff:
      raise UserError(
        f"{workdir} holds a run with a different config (fields {diff}); use a new --workdir"
      )
  if multihost.is_writer():
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(new, indent=2))
    tmp.replace(path)


def truncate_metrics(path: Path, start: int) -> None:
  """Drops lines logged for steps >= ``start`` (a step killed before its checkpoint reruns);
  process 0 only."""
  path = Path(path)
  if not path.exists() or not multihost.is_writer():
    return
  keep = [
    ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] < start
  ]
  path.write_text("".join(ln + "\n" for ln in keep))


def write_plots(workdir: Path) -> list[Path]:
  """``workdir/plots/*.png`` from ``workdir/metrics.jsonl`` (process 0 only: none elsewhere)."""
  workdir = Path(workdir)
  if not multihost.is_writer():
    return []
  return plots.write_plots(metrics.read_metrics(workdir / "metrics.jsonl"), workdir / "plots")


class Run:
  """One call of a training loop on ``workdir`` (use as a context manager: `close` on exit).

  Creating it makes the workdir and ``subdirs`` and checks / writes ``config.json``. The loop
  then opens the checkpoints (`open_checkpoints`, once it knows its model config), restores
  (`restore`: also truncates ``metrics.jsonl`` to the resumed step), opens the metrics writer
  (`open_metrics`) and the progress bar (`open_progress`), and per step calls `log`, `save`
  (when `save_due`), `plot_if_due` and `advance`; `finish` writes the plots of a run that was
  already complete. ``config`` needs ``steps``, ``checkpoint_every``, ``keep_checkpoints``,
  ``plot_every``, ``progress`` and ``to_json_best_effort``.
  """

  def __init__(self, config, workdir, subdirs: Iterable[str] = (), defaults=None):
    self.config = config
    self.workdir = Path(workdir)
    self.workdir.mkdir(parents=True, exist_ok=True)
    check_resume_config(self.workdir, config, defaults)
    for sub in subdirs:
      (self.workdir / sub).mkdir(exist_ok=True)
    self.steps = int(config.steps)
    self.ckpt: checkpoint.Checkpointer | None = None
    self.writer: metrics.MetricsWriter | None = None
    self.bar: metrics.ProgressBar | None = None
    self.start = 0
    self._closers: list[Callable[[], Any]] = []

  # ------------------------------------------------------------------------------ opening
  def open_checkpoints(self, model_config: Any = None) -> None:
    self.ckpt = checkpoint.Checkpointer(
      self.workdir / "checkpoints",
      max_to_keep=self.config.keep_checkpoints,
      model_config=model_config,
    )

  def restore(self, tree: Any) -> tuple[int, Any, dict | None]:
    """``(start step, device tree, host dict)`` of the latest checkpoint, restored into the
    structure and shardings of ``tree``; ``(0, tree, None)`` without one. Drops the metrics
    rows of steps >= the start step. A checkpoint that cannot be used raises `UserError`."""
    host = None
    latest = self.ckpt.latest_step()
    if latest is not None:
      try:
        tree, host = self.ckpt.restore(tree, latest)
      except checkpoint.CheckpointError as e:
        raise UserError(f"checkpoint: {e}") from e
      self.start = int(host["next_step"])
    truncate_metrics(self.workdir / "metrics.jsonl", self.start)
    return self.start, tree, host

  def open_metrics(self, wandb_project: str | None = None) -> metrics.MetricsWriter:
    self.writer = metrics.MetricsWriter(
      self.workdir, wandb_project=wandb_project, wandb_config=config_json(self.config)
    )
    return self.writer

  def open_progress(self, keys: tuple[str, ...]) -> metrics.ProgressBar:
    self.bar = metrics.ProgressBar(
      self.steps, initial=self.start, enabled=self.config.progress, keys=keys
    )
    return self.bar

  def on_close(self, fn: Callable[[], Any]) -> None:
    """Calls ``fn`` in `close`, after the run's own files are closed (e.g. a sandbox pool)."""
    self._closers.append(fn)

  # ----------------------------------------------------------------------------- per step
  def is_final(self, step: int) -> bool:
    return step == self.steps - 1

  def log(self, step: int, row: Mapping[str, Any]) -> None:
    self.writer.write(step, row)

  def save_due(self, step: int) -> bool:
    """Whether the state after ``step`` is checkpointed: every ``checkpoint_every`` steps and
    after the last one."""
    return (step + 1) % self.config.checkpoint_every == 0 or self.is_final(step)

  def save(self, step: int, tree: Any, host: Mapping[str, Any]) -> None:
    """Checkpoints the state after ``step``: ``tree`` (device) and ``host`` (JSON), with
    ``next_step`` (first in the host dict) = ``step + 1``."""
    self.ckpt.save(step + 1, tree, {"next_step": step + 1, **host})

  def plot_if_due(self, step: int) -> None:
    """The plots after ``step``, every ``plot_every`` steps (0: never) and after the last."""
    every = self.config.plot_every
    if self.is_final(step) or (every and (step + 1) % every == 0):
      self.writer.flush()
      write_plots(self.workdir)

  def advance(self, row: Mapping[str, Any]) -> None:
    """One step done: the progress bar moves (showing ``row``'s chosen keys)."""
    self.bar.update(1, row)

  def end_step(
    self, step: int, row: Mapping[str, Any], tree: Any, host: Callable[[], Mapping[str, Any]]
  ) -> None:
    """Everything after ``step`` computed ``row``, as both loops do it: log the row, save
    ``tree`` and ``host()`` (the host dict, built only when a save is due), plot when due,
    move the progress bar."""
    self.log(step, row)
    if self.save_due(step):
      self.save(step, tree, host())
    self.plot_if_due(step)
    self.advance(row)

  # ------------------------------------------------------------------------------ closing
  def finish(self) -> None:
    """After the loop: a run resumed when already complete still gets its plots."""
    if self.start >= self.steps:
      write_plots(self.workdir)

  def close(self) -> None:
    """Closes the bar and the writer, waits for the checkpoints and closes them, then the
    `on_close` callbacks; each at most once, all of them even if one raises."""
    closers = []
    if self.bar is not None:
      closers.append(self.bar.close)
    if self.writer is not None:
      closers.append(self.writer.close)
    if self.ckpt is not None:
      closers += [self.ckpt.wait_until_finished, self.ckpt.close]
    closers += self._closers
    self.bar = self.writer = self.ckpt = None
    self._closers = []
    error = None
    for fn in closers:
      try:
        fn()
      except Exception as e:  # noqa: BLE001 (the first error is raised once all are closed)
        error = error or e
    if error is not None:
      raise error

  def __enter__(self) -> Run:
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    try:
      self.close()
    except Exception as e:
      if exc_type is None:
        raise
      # the loop's own error is the one to raise; a failure to close is reported beside it
      print(f"warning: closing the run after an error failed too: {e!r}", file=sys.stderr)


def load_policy(config, mesh):
  """``(model, model config, tokenizer)`` of a config's ``model`` section on ``mesh`` (bad
  paths or an incompatible tokenizer raise `UserError`)."""
  import jax.numpy as jnp

  from spade_jax.models import CheckpointError, load_pretrained
  from spade_jax.tokenizer import TokenizerError, load_tokenizer

  try:
    tok = load_tokenizer(config.model.tokenizer or config.model.path)
  except TokenizerError as e:
    raise UserError(f"tokenizer: {e}") from e
  try:
    model, cfg = load_pretrained(
      config.model.path,
      dtype=jnp.dtype(config.model.dtype),
      param_dtype=jnp.float32,
      mesh=mesh,
      remat=config.model.remat,
      attention_impl=config.model.attention_impl,
    )
  except (CheckpointError, ValueError) as e:
    raise UserError(f"model: {e}") from e
  if tok.vocab_size > cfg.vocab_size:
    raise UserError(
      f"tokenizer has {tok.vocab_size} tokens but the model's vocabulary is "
      f"{cfg.vocab_size}: incompatible tokenizer"
    )
  return model, cfg, tok


__all__ = [
  "load_policy",
  "RESUMABLE_CHANGES",
  "Run",
  "UserError",
  "check_resume_config",
  "config_differences",
  "config_json",
  "truncate_metrics",
  "write_plots",
]
