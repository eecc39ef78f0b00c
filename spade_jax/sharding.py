"""Mesh construction and logical-axis sharding rules.

This is the only module that maps logical axis names (``vocab``, ``embed``, ``heads``, ...) to
mesh axes (``data``, ``fsdp``, ``expert``, ``tensor``). Parameters carry their logical
names as metadata (key :data:`LOGICAL_AXES_KEY` on every ``nnx.Param``); activations are
constrained with :func:`constrain`. A logical name maps to a mesh axis only where that axis
divides the dimension; otherwise the dimension is replicated (for example SmolLM2's 3 kv heads
on a tensor axis of 2). ``jit`` with shardings is the modern spelling of ``pjit``.

Meshes have three axes ``(data, fsdp, tensor)`` (every config and CLI mesh shape of three
entries: no ``expert`` axis, the same as an expert axis of size 1) or four, ``(data, fsdp, expert,
tensor)``. The ``expert`` axis is expert parallelism: MoE expert weights ``[E, ...]`` split their
expert dimension over it (and over ``fsdp`` too where that still divides ``E``), while everything
else treats it as one more data/FSDP axis (the batch and the dense weights' ``embed`` dimension
split over it), so no device idles or holds a duplicate outside the expert MLPs. Tokens reach
their experts through XLA's SPMD partitioner (``ragged_dot`` over expert-sharded weights), not a
hand-written all-to-all.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

# Metadata key on nnx.Param holding the parameter's logical axis names (a tuple of str|None).
LOGICAL_AXES_KEY = "logical_axes"

MESH_AXES = ("data", "fsdp", "expert", "tensor")
MESH_AXES_3 = ("data", "fsdp", "tensor")  # a three-entry mesh shape: no expert axis

# Logical name -> mesh axis (or tuple of mesh axes, or None = replicated).
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
  # activations
  ("batch", ("data", "fsdp", "expert")),
  ("length", None),
  ("act_embed", None),
  ("act_heads", "tensor"),
  ("act_kv_heads", "tensor"),
  ("act_mlp", "tensor"),
  ("act_vocab", "tensor"),
  ("cache_length", None),
  # parameters
  ("layers", None),
  ("vocab", "tensor"),
  ("embed", ("fsdp", "expert")),
  ("heads", "tensor"),
  ("kv_heads", "tensor"),
  ("head_dim", None),
  ("mlp", "tensor"),
  # MoE expert weights [E, D, F]: experts split over the expert axis, then over fsdp when that
  # still divides E (each device then holds whole experts: ragged_dot needs no gathered hidden
  # dimension); otherwise their ``embed`` dimension takes fsdp (an axis is used once per array)
  ("expert", ("expert", "fsdp")),
  ("norm", None),
)

_state = threading.local()


def mesh_axes(ndim: int) -> tuple[str, ...]:
  """The axis names of a mesh shape of ``ndim`` entries: 3 ``(data, fsdp, tensor)`` or 4
  ``(data, fsdp, expert, tensor)``."""
  if ndim == 3:
    return MESH_AXES_3
  if ndim == 4:
    return MESH_AXES
  want = "3 entries (data, fsdp, tensor) or 4 (data, fsdp, expert, tensor)"
  raise ValueError(f"a mesh shape has {want}, got {ndim}")


def make_mesh(
  shape: Sequence[int] = (-1, 1, 1),
  axes: Sequence[str] | None = None,
  devices: Sequence[jax.Device] | None = None,
) -> Mesh:
  """Builds a mesh with ``AxisType.Auto`` axes; one ``-1`` entry fills from the device count.
  ``axes`` defaults to :func:`mesh_axes` of the shape's length (3 or 4 entries)."""
  shape = list(shape)
  if axes is None:
    axes = mesh_axes(len(shape))
  if len(shape) != len(axes):
    raise ValueError(f"mesh shape {shape} and axes {tuple(axes)} differ in length")
  devices = list(devices if devices is not None else jax.devices())
  n = len(devices)
  if shape.count(-1) > 1:
    raise ValueError(f"at most one -1 in mesh shape, got {shape}")
  if -1 in shape:
    known = math.prod(s for s in shape if s != -1)
    if known <= 0 or n % known:
      raise ValueError(f"cannot fill mesh shape {shape} from {n} devices")
    shape[shape.index(-1)] = n // known
  if math.prod(shape) != n:
    raise ValueError(f"mesh shape {tuple(shape)} needs {math.prod(shape)} devices, have {n}")
  dev_array = np.asarray(devices, dtype=object).reshape(shape)
  return Mesh(dev_array, tuple(axes), axis_types=(AxisType.Auto,) * len(axes))


def get_rules() -> tuple[tuple[str, Any], ...]:
  return getattr(_state, "rules", DEFAULT_RULES)


@contextlib.contextmanager
def axis_rules(rules: Sequence[tuple[str, Any]]):
  """Temporarily replaces the logical->mesh rules (e.g. pure FSDP or pure tensor parallel)."""
  old = get_rules()
  _state.rules = tuple(rules)
  try:
    yield
  finally:
    _state.rules = old


def logical_to_spec(
  names: Sequence[str | None],
  shape: Sequence[int] | None = None,
  mesh: Mesh | None = None,
  rules: Sequence[tuple[str, Any]] | None = None,
) -> PartitionSpec:
  """Maps logical axis names to a PartitionSpec under the rules.

  With ``shape`` and ``mesh``, a mesh axis that does not divide its dimension (or that is absent
  from the mesh, or already used by an earlier dimension) is dropped, so the result is always a
  valid sharding for that array. Mesh axes of size 1 are dropped (an equivalent spec).
  """
  table = dict(rules if rules is not None else get_rules())
  used: set[str] = set()
  out = []
  for i, name in enumerate(names):
    if name is None:
      out.append(None)
      continue
    if name not in table:
      raise KeyError(f"logical axis {name!r} has no sharding rule; known: {sorted(table)}")
    target = table[name]
    axes = () if target is None else (target,) if isinstance(target, str) else tuple(target)
    kept = []
    size = 1
    for ax in axes:
      if ax in used:
        continue
      if mesh is not None:
        if ax not in mesh.shape or mesh.shape[ax] == 1:
          continue
        if shape is not None and shape[i] % (size * mesh.shape[ax]):
          continue
        size *= mesh.shape[ax]
      kept.append(ax)
    used.update(kept)
    out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
  return PartitionSpec(*out)


def named_sharding(mesh: Mesh, names: Sequence[str | None], shape: Sequence[int]) -> NamedSharding:
  return NamedSharding(mesh, logical_to_spec(names, shape, mesh))


def current_mesh() -> Mesh | None:
  return getattr(_state, "mesh", None)


@contextlib.contextmanager
def use_mesh(mesh: Mesh | None):
  """Makes ``mesh`` the target of :func:`constrain` (and sets it as jax's current mesh)."""
  old = current_mesh()
  _state.mesh = mesh
  try:
    if mesh is None:
      yield
    else:
      with jax.set_mesh(mesh):
        yield
  finally:
    _state.mesh = old


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
  """``with_sharding_constraint`` by logical names; a no-op outside :func:`use_mesh`."""
  mesh = current_mesh()
  if mesh is None or mesh.size == 1:
    return x
  if len(names) != x.ndim:
    raise ValueError(f"{len(names)} logical names for an array of rank {x.ndim}")
  return jax.lax.with_sharding_constraint(x, named_sharding(mesh, names, x.shape))


def param_logical_axes(state: Any) -> Any:
  """Tree of logical-axis tuples (one per nnx.Param in ``state``, from its metadata)."""
  from flax import nnx

  def get(v):
    if isinstance(v, nnx.Variable):
      md = v.get_metadata()
      names = md.get(LOGICAL_AXES_KEY)
      if names is None:
        return (None,) * len(v.shape)
      return tuple(names)
    return (None,) * np.ndim(v)

  return jax.tree.map(get, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def state_shardings(state: Any, mesh: Mesh) -> Any:
  """NamedSharding for every variable in an nnx State (abstract or concrete)."""
  from flax import nnx

  def get(v):
    if isinstance(v, nnx.Variable):
      names = v.get_metadata().get(LOGICAL_AXES_KEY) or (None,) * len(v.shape)
      return v.replace(named_sharding(mesh, names, v.shape))
    return NamedSharding(mesh, PartitionSpec())

  return jax.tree.map(get, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def create_sharded(init_fn: Callable[[], Any], mesh: Mesh) -> Any:
  """Creates an nnx module directly sharded: an abstract model first, then a jitted init whose
  outputs land in their shardings (the full model never materialises on one device)."""
  from flax import nnx

  abstract = nnx.eval_shape(init_fn)
  graphdef, abs_state = nnx.split(abstract)
  shardings = state_shardings(abs_state, mesh)

  def init():
    return nnx.state(init_fn())

  with use_mesh(mesh):
    state = jax.jit(init, out_shardings=shardings)()
  return nnx.merge(graphdef, state)


def shard_model(model: Any, mesh: Mesh) -> Any:
  """Places an existing nnx module's parameters according to their logical axes."""
  from flax import nnx

  graphdef, state = nnx.split(model)
  state = jax.device_put(state, state_shardings(state, mesh))
  return nnx.merge(graphdef, state)


def describe(state: Any) -> dict[str, str]:
  """Path -> PartitionSpec string of every array in a state (for logs and tests)."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(state):
    sharding = getattr(leaf, "sharding", None)
    spec = getattr(sharding, "spec", None)
    out[jax.tree_util.keystr(path)] = str(spec)
  return out
