"""Multi-process (multi-host) runs: start-up, host reads of sharded arrays, the writing process.

A multi-host run is one program per process (SPMD): every process builds the same mesh over
`jax.devices()` (all processes' devices), calls the same jitted functions in the same order and
holds only its addressable shards of each array.

* `initialize` starts `jax.distributed` from explicit ``--coordinator_address``,
  ``--num_processes``, ``--process_id`` (`check_args` validates them) or, with none given, from
  SLURM / Cloud TPU auto-detection. It must run before anything starts jax's backend.
* `to_host` is the one way to read a possibly sharded array on the host: an array whose shards
  this process does not all hold is first gathered to fully replicated (a collective, so every
  process must call it at the same point, as SPMD code does anyway).
* `from_host` places host values (the same on every process) into shardings that span other
  processes' devices, where jit refuses numpy inputs.
* `owns` / `shared_map` / `allgather_objects` split host work between the processes: item ``i``
  is done by process ``i % process_count`` (sandboxed validation, translation, environment
  steps), and the results, pickled, are gathered to every process, so every process continues
  with the same values as a one-process run computes alone.
* `is_writer` says whether this process writes the run's files (metrics, plots, config,
  environment records, transcripts): process 0 only. Checkpoints are the exception: every
  process calls orbax's save, which writes each shard once.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec


def check_args(
  coordinator_address: str | None, num_processes: int | None, process_id: int | None
) -> dict | None:
  """Keyword arguments of `jax.distributed.initialize` for the three flags, ``None`` when none
  is given; `ValueError` (one line) when only some are given or a value is out of range."""
  given = [v is not None for v in (coordinator_address, num_processes, process_id)]
  if not any(given):
    return None
  if not all(given):
    raise ValueError(
      "--coordinator_address, --num_processes and --process_id go together (got only "
      + ", ".join(
        f"--{n}" for n, g in zip(("coordinator_address", "num_processes", "process_id"), given) if g
      )
      + ")"
    )
  host, sep, port = coordinator_address.rpartition(":")
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f"--coordinator_address must be HOST:PORT, got {coordinator_address!r}")
  if num_processes < 1:
    raise ValueError(f"--num_processes must be >= 1, got {num_processes}")
  if not 0 <= process_id < num_processes:
    raise ValueError(f"--process_id must be in [0, {num_processes}), got {process_id}")
  return dict(
    coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
  )


def initialize(args: dict | None = None) -> None:
  """`jax.distributed.initialize` with ``args`` (from `check_args`), or auto-detected (SLURM,
  Cloud TPU) when ``None``. On CPU, cross-process collectives use gloo (jax's default
  ``jax_cpu_collectives_implementation``)."""
  jax.distributed.initialize(**(args or {}))


def is_writer() -> bool:
  """Whether this process writes the run's files (process 0)."""
  return jax.process_index() == 0


def owns(i: int) -> bool:
  """Whether this process does item ``i`` of work split between the processes."""
  return int(i) % jax.process_count() == jax.process_index()


def allgather_objects(obj: Any) -> list:
  """Every process's ``obj`` (any picklable value), in process order, on every process (a
  collective: every process must call it at the same point). One process: ``[obj]``."""
  if jax.process_count() == 1:
    return [obj]
  from jax.experimental import multihost_utils

  data = np.frombuffer(pickle.dumps(obj), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.array([data.size], np.int32)))
  buf = np.zeros(int(sizes.max()), np.uint8)
  buf[: data.size] = data
  gathered = np.asarray(multihost_utils.process_allgather(buf))
  # our own processes' pickles of values this program computed: never untrusted bytes
  return [pickle.loads(gathered[p, : int(sizes[p, 0])].tobytes()) for p in range(len(sizes))]


def shared_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list:
  """``[fn(x) for x in items]``, each item computed only by the process that `owns` its index
  and the results gathered to all (`allgather_objects`); one process computes them all."""
  if jax.process_count() == 1:
    return [fn(x) for x in items]
  mine = {i: fn(x) for i, x in enumerate(items) if owns(i)}
  merged: dict[int, Any] = {}
  for part in allgather_objects(mine):
    merged.update(part)
  return [merged[i] for i in range(len(items))]


@functools.cache
def _replicate(shardings: tuple) -> Any:
  return jax.jit(lambda xs: xs, out_shardings=shardings)


def _replicated(sharding) -> NamedSharding:
  if isinstance(sharding, NamedSharding):
    return sharding.update(spec=PartitionSpec())
  devices = np.asarray(sorted(sharding.device_set, key=lambda d: d.id), dtype=object)
  return NamedSharding(jax.sharding.Mesh(devices, ("all",)), PartitionSpec())


def to_host(tree: Any) -> Any:
  """``tree`` with every array as a numpy array of its whole (global) value, on every process.

  Arrays this process holds entirely (every array of a one-process run, replicated ones) are
  copied as `jax.device_get` does; the others are gathered first by one jitted reshard to fully
  replicated, which every process must reach (SPMD code calls it everywhere alike). Non-array
  leaves pass through `jax.device_get` unchanged.
  """
  leaves, treedef = jax.tree.flatten(tree)
  partial = [
    i
    for i, x in enumerate(leaves)
    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated
  ]
  if partial:
    shardings = tuple(_replicated(leaves[i].sharding) for i in partial)
    gathered = _replicate(shardings)(tuple(leaves[i] for i in partial))
    for i, x in zip(partial, gathered):
      leaves[i] = x
  return jax.tree.unflatten(treedef, jax.device_get(leaves))


def from_host(tree: Any, shardings: Any) -> Any:
  """``tree`` with every host (numpy / python) leaf whose sharding (the same leaf of
  ``shardings``) spans devices of other processes made a global `jax.Array` of it, each process
  filling its own shards from its copy (every process holds the same value, as SPMD code does).
  Everything else is returned as it is, so a one-process run passes numpy to jit as before."""

  def one(x, s):
    if isinstance(x, jax.Array) or s.is_fully_addressable:
      return x
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, s, lambda idx: x[idx])

  return jax.tree.map(one, tree, shardings)


__all__ = [
  "allgather_objects",
  "check_args",
  "from_host",
  "initialize",
  "is_writer",
  "owns",
  "shared_map",
  "to_host",
]
