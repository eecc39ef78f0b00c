"""Full-state checkpoints: orbax ``CheckpointManager`` with the ``args`` API.

One checkpoint per step directory holds three items:

* ``state`` — the device pytree (``TrainState``: params, optimizer state, RNG, step, reference
  params), saved sharded and restored directly into the shardings of an abstract target;
* ``host`` — a JSON side-car for arbitrary host state (env pool, memory, trackers, delayed
  buffers, data iterators), so a resumed run continues exactly;
* ``meta`` — format version and the model config, checked on restore: a checkpoint of a
  different architecture is refused with the differing fields named.

Orbax writes each step to a temporary directory and renames it when complete, so a crash mid-
save never leaves a checkpoint that looks valid; the newest ``max_to_keep`` steps are kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

FORMAT_VERSION = 1
# TransformerConfig fields that change only how the model is computed, not its parameters.
COMPUTE_ONLY_FIELDS = ("dtype", "remat", "attention_chunk", "attention_impl")


class CheckpointError(Exception):
  """A checkpoint cannot be used (missing, unreadable, or incompatible)."""


class CheckpointCorruptError(CheckpointError):
  """A checkpoint's files are missing or unreadable."""


class CheckpointMismatchError(CheckpointError):
  """A checkpoint was written for a different model or state layout."""


def _jsonable(value: Any) -> Any:
  """Round-trips through JSON (numpy scalars and arrays become python numbers and lists)."""

  def default(x):
    if isinstance(x, np.generic):
      return x.item()
    if isinstance(x, np.ndarray | jax.Array):
      return np.asarray(x).tolist()
    if dataclasses.is_dataclass(x):
      return dataclasses.asdict(x)
    raise TypeError(f"host state value of type {type(x).__name__} is not JSON-serialisable")

  return json.loads(json.dumps(value, default=default))


def _config_dict(model_config: Any) -> dict | None:
  if model_config is None:
    return None
  if hasattr(model_config, "to_dict"):
    model_config = model_config.to_dict()
  out = _jsonable(dict(model_config))
  for key in COMPUTE_ONLY_FIELDS:
    out.pop(key, None)
  return out


def _abstract(target: Any) -> Any:
  def one(x):
    if isinstance(x, jax.ShapeDtypeStruct):
      return x
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))

  return jax.tree.map(one, target)


def _key_name(k: Any) -> str:
  for attr in ("key", "name", "idx"):
    if hasattr(k, attr):
      return str(getattr(k, attr))
  return str(k)


def _leaf_paths(tree: Any) -> set[str]:
  """Leaf paths as ``a/b/0/c`` (orbax's metadata tree spells attributes as dict keys)."""
  return {
    "/".join(_key_name(k) for k in p)
    for p, _ in jax.tree_util.tree_leaves_with_path(tree, is_leaf=lambda x: x is None)
    if _ is not None
  }


class Checkpointer:
  """Saves and restores (device state, host state) per training step under ``directory``."""

  def __init__(
    self,
    directory: str | os.PathLike,
    *,
    max_to_keep: int = 3,
    model_config: Any = None,
    async_save: bool = True,
  ):
    self.directory = os.path.abspath(os.fspath(directory))
    self.model_config = _config_dict(model_config)
    options = ocp.CheckpointManagerOptions(
      preservation_policy=ocp.checkpoint_managers.LatestN(n=max_to_keep),
      enable_async_checkpointing=async_save,
      create=True,
    )
    handlers = {
      "state": ocp.StandardCheckpointHandler(),
      "host": ocp.JsonCheckpointHandler(),
      "meta": ocp.JsonCheckpointHandler(),
    }
    self._manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, host_state: Mapping[str, Any] | None = None) -> None:
    """Saves ``state`` (a device pytree) and ``host_state`` (JSON-serialisable) as ``step``.
    Asynchronous when enabled: returns once the arrays are copied off the device, so the caller
    may donate ``state`` to the next update right away."""
    meta = {"format": FORMAT_VERSION, "step": int(step), "model_config": self.model_config}
    args = ocp.args.Composite(
      state=ocp.args.StandardSave(state),
      host=ocp.args.JsonSave(_jsonable(dict(host_state or {}))),
      meta=ocp.args.JsonSave(meta),
    )
    self._manager.save(int(step), args=args, force=True)

  def _check_step(self, step: int | None) -> int:
    self._manager.wait_until_finished()
    self._manager.reload()
    steps = self.all_steps()
    if step is None:
      if not steps:
        raise CheckpointError(f"no checkpoint found in {self.directory}")
      return steps[-1]
    if step not in steps:
      raise CheckpointError(f"no checkpoint for step {step} in {self.directory}; have {steps}")
    return step

  def _restore_json(self, step: int, name: str) -> dict:
    try:
      out = self._manager.restore(step, args=ocp.args.Composite(**{name: ocp.args.JsonRestore()}))
      value = out[name]
    except Exception as e:  # orbax raises assorted types for missing/garbled files
      raise CheckpointCorruptError(
        f"checkpoint step {step} in {self.directory} is unreadable ({name}): "
        f"{type(e).__name__}: {e}"
      ) from e
    if not isinstance(value, dict):
      raise CheckpointCorruptError(
        f"checkpoint step {step} in {self.directory}: {name} is not a JSON object"
      )
    return value

  def check_compatible(self, step: int | None = None) -> int:
    """Raises unless the checkpoint's model config matches this checkpointer's; returns the
    step checked."""
    step = self._check_step(step)
    meta = self._restore_json(step, "meta")
    if meta.get("format") != FORMAT_VERSION:
      raise CheckpointMismatchError(
        f"checkpoint step {step} has format {meta.get('format')!r}, expected {FORMAT_VERSION}"
      )
    saved = meta.get("model_config")
    if self.model_config is not None and saved is not None and saved != self.model_config:
      keys = sorted(set(saved) | set(self.model_config))
      diffs = [
        f"{k}: checkpoint={saved.get(k)!r} current={self.model_config.get(k)!r}"
        for k in keys
        if saved.get(k) != self.model_config.get(k)
      ]
      raise CheckpointMismatchError(
        f"checkpoint step {step} in {self.directory} was written for a different model "
        f"config ({'; '.join(diffs)})"
      )
    return step

  def restore(self, target: Any, step: int | None = None) -> tuple[Any, dict]:
    """Restores ``(state, host_state)`` of ``step`` (default: the latest) into the structure,
    dtypes and shardings of ``target`` (an abstract state of ShapeDtypeStructs, or a concrete
    state whose arrays give the shardings)."""
    step = self.check_compatible(step)
    abstract = _abstract(target)
    try:
      saved_tree = self._manager.item_metadata(step)["state"]
    except Exception as e:
      raise CheckpointCorruptError(
        f"checkpoint step {step} in {self.directory} has unreadable state metadata: "
        f"{type(e).__name__}: {e}"
      ) from e
    if saved_tree is not None:
      saved_paths, wanted = _leaf_paths(saved_tree), _leaf_paths(abstract)
      if saved_paths != wanted:
        missing, extra = sorted(wanted - saved_paths), sorted(saved_paths - wanted)
        raise CheckpointMismatchError(
          f"checkpoint step {step} in {self.directory} has a different state layout: "
          f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
          f"unexpected {extra[:5]}{'...' if len(extra) > 5 else ''}"
        )
    try:
      out = self._manager.restore(
        step,
        args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), host=ocp.args.JsonRestore()
        ),
      )
    except Exception as e:
      raise CheckpointCorruptError(
        f"checkpoint step {step} in {self.directory} is unreadable: {type(e).__name__}: {e}"
      ) from e
    return out["state"], dict(out["host"] or {})

  def restore_host_state(self, step: int | None = None) -> dict:
    """Only the JSON side-car (cheap: no arrays are read)."""
    return self._restore_json(self._check_step(step), "host")

  def wait_until_finished(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
