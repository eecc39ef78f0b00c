"""The optimizer chain against hand-computed AdamW steps, decay masks and schedules."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl import optimizer as opt


def test_defaults_are_the_spade_recipe():
  cfg = opt.OptimizerConfig()
  assert (cfg.name, cfg.learning_rate, cfg.schedule) == ("adamw", 1e-6, "constant")
  assert (cfg.b1, cfg.b2, cfg.weight_decay) == (0.9, 0.98, 0.1)


def test_decay_mask_skips_norms_and_biases():
  cfg = TransformerConfig(
    vocab_size=11,
    embed_dim=8,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=4,
    mlp_dim=16,
    qkv_bias=True,
    qk_norm=True,
  )
  _, params = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
  mask = nnx.to_pure_dict(opt.decay_mask(params))
  assert mask["blocks"]["q"] and mask["blocks"]["down"] and mask["embed"] and mask["lm_head"]
  for name in ("attn_norm", "mlp_norm", "q_norm", "k_norm", "q_bias", "k_bias", "v_bias"):
    assert not mask["blocks"][name], name
  assert not mask["final_norm"]


def test_two_adamw_steps_match_hand_computation():
  cfg = opt.OptimizerConfig(learning_rate=0.1, weight_decay=0.5, grad_clip_norm=1.0, b2=0.98)
  tx = opt.make_optimizer(cfg)
  params = {"w": jnp.array([1.0, -2.0]), "norm": jnp.array([3.0])}
  grads = [
    {"w": jnp.array([3.0, 4.0]), "norm": jnp.array([0.0])},  # norm 5: clipped to 1
    {"w": jnp.array([0.1, -0.2]), "norm": jnp.array([0.2])},
  ]  # norm 0.3: not clipped
  state = tx.init(params)
  p = {k: np.asarray(v, np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v = {k: np.zeros_like(x) for k, x in p.items()}
  for t, g in enumerate(grads, start=1):
    updates, state = tx.update(g, state, params)
    params = optax.apply_updates(params, updates)
    gn = np.sqrt(sum(float(jnp.sum(x * x)) for x in g.values()))
    scale = min(1.0, 1.0 / gn)
    for k in p:
      gk = np.asarray(g[k], np.float64) * scale
      m[k] = 0.9 * m[k] + 0.1 * gk
      v[k] = 0.98 * v[k] + 0.02 * gk * gk
      step = (m[k] / (1 - 0.9**t)) / (np.sqrt(v[k] / (1 - 0.98**t)) + cfg.eps)
      decay = 0.5 * p[k] if k == "w" else 0.0  # "norm" is not decayed
      p[k] = p[k] - 0.1 * (step + decay)
  for k in p:
    np.testing.assert_allclose(params[k], p[k], rtol=1e-6, err_msg=k)


def test_schedules():
  warm = opt.learning_rate_schedule(opt.OptimizerConfig(learning_rate=1.0, warmup_steps=4))
  np.testing.assert_allclose([float(warm(i)) for i in (0, 2, 4, 100)], [0, 0.5, 1, 1])
  cos = opt.learning_rate_schedule(
    opt.OptimizerConfig(learning_rate=1.0, schedule="cosine", decay_steps=10, min_lr_ratio=0.1)
  )
  np.testing.assert_allclose(
    [float(cos(i)) for i in (0, 5, 10, 20)], [1, 0.55, 0.1, 0.1], rtol=1e-6
  )
  lin = opt.learning_rate_schedule(
    opt.OptimizerConfig(learning_rate=2.0, schedule="linear", decay_steps=4, warmup_steps=2)
  )
  np.testing.assert_allclose([float(lin(i)) for i in (1, 2, 4, 6, 9)], [1, 2, 1, 0, 0])


def test_config_validation():
  with pytest.raises(ValueError, match="optimizer name"):
    opt.OptimizerConfig(name="sgd")
  with pytest.raises(ValueError, match="decay_steps"):
    opt.OptimizerConfig(schedule="cosine")


def test_bfloat16_moments_are_stored_narrow_and_track_float32_adam():
  """``moments_dtype="bfloat16"``: Adam's moments live in bfloat16 (the step count stays an
  integer), and ten steps stay within bfloat16 rounding of the float32 optimizer's."""
  kw = dict(learning_rate=0.01, weight_decay=0.1, grad_clip_norm=1.0)
  wide = opt.make_optimizer(opt.OptimizerConfig(**kw))
  narrow = opt.make_optimizer(opt.OptimizerConfig(**kw, moments_dtype="bfloat16"))
  rng = np.random.default_rng(0)
  params = {"w": jnp.asarray(rng.normal(size=(4, 8)), jnp.float32)}
  state_w, state_n = wide.init(params), narrow.init(params)
  leaves = {str(x.dtype) for x in jax.tree.leaves(state_n)}
  assert leaves == {"bfloat16", "int32"}, leaves
  p_w, p_n = params, params
  for _ in range(10):
    g = {"w": jnp.asarray(rng.normal(size=(4, 8)), jnp.float32)}
    u_w, state_w = wide.update(g, state_w, p_w)
    u_n, state_n = narrow.update(g, state_n, p_n)
    p_w, p_n = optax.apply_updates(p_w, u_w), optax.apply_updates(p_n, u_n)
  assert p_n["w"].dtype == jnp.float32
  step_size = float(jnp.abs(p_w["w"] - params["w"]).mean())
  assert float(jnp.abs(p_n["w"] - p_w["w"]).max()) < 0.05 * step_size
  assert not np.array_equal(np.asarray(p_n["w"]), np.asarray(p_w["w"]))  # it did round


def test_unknown_moments_dtype_is_refused():
  with pytest.raises(ValueError, match="moments_dtype"):
    opt.OptimizerConfig(moments_dtype="float16")
