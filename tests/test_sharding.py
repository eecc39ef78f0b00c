"""Mesh construction and the logical->mesh rules table."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec

from spade_jax import sharding


def test_make_mesh_fills_and_uses_auto_axes():
  mesh = sharding.make_mesh((2, -1, 2))
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
  assert all(t == AxisType.Auto for t in mesh.axis_types)
  with pytest.raises(ValueError, match="cannot fill"):
    sharding.make_mesh((3, -1, 1))
  with pytest.raises(ValueError, match="needs 4 devices"):
    sharding.make_mesh((2, 2, 1))


def test_rules_table_and_divisibility_fallback():
  mesh = sharding.make_mesh((2, 2, 2))
  spec = sharding.logical_to_spec
  assert spec(("batch", "length", "act_embed"), (8, 5, 16), mesh) == PartitionSpec(
    ("data", "fsdp"), None, None
  )
  assert spec(("embed", "heads", "head_dim"), (16, 4, 8), mesh) == PartitionSpec(
    "fsdp", "tensor", None
  )
  # 3 kv heads cannot split over tensor=2 -> replicated on that dimension
  assert spec(("embed", "kv_heads", "head_dim"), (16, 3, 8), mesh) == PartitionSpec(
    "fsdp", None, None
  )
  # batch of 2 keeps data but drops fsdp (2 does not divide 2*2)
  assert spec(("batch", None), (2, 4), mesh) == PartitionSpec("data", None)
  with pytest.raises(KeyError, match="no sharding rule"):
    spec(("bogus",), (4,), mesh)


def test_axis_rules_override():
  mesh = sharding.make_mesh((1, 1, 8))
  with sharding.axis_rules([("embed", None), ("mlp", "tensor")]):
    assert sharding.logical_to_spec(("embed", "mlp"), (16, 64), mesh) == PartitionSpec(
      None, "tensor"
    )
  assert sharding.logical_to_spec(("embed",), (16,), mesh) == PartitionSpec(None)


def test_constrain_shards_inside_jit():
  mesh = sharding.make_mesh((2, 2, 2))

  @jax.jit
  def f(x):
    return sharding.constrain(x * 2, ("batch", "act_mlp"))

  with sharding.use_mesh(mesh):
    y = f(jnp.ones((8, 6)))
  assert y.sharding.spec == PartitionSpec(("data", "fsdp"), "tensor")
  np.testing.assert_array_equal(np.asarray(y), 2 * np.ones((8, 6)))
  assert sharding.constrain(jnp.ones(3), ("batch",)).shape == (3,)  # no mesh: no-op
