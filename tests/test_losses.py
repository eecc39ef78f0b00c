"""Policy loss vs hand-written formulas; chunked log-softmax vs the naive full-vocab version."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl import losses

B, T = 6, 9


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  logp = -rng.uniform(0.05, 3.0, (B, T))
  # old differs from logp so ratios fall below, inside and above [1 - 0.2, 1 + 0.28]
  old = logp + rng.choice([-0.6, -0.1, 0.0, 0.1, 0.6], (B, T))
  # rollout differs from old so TIS weights fall on both sides of the cap
  roll = old + rng.choice([-1.2, -0.3, 0.0, 0.4, 1.5], (B, T))
  ref = logp + rng.normal(0, 0.5, (B, T))
  ent = rng.uniform(0.1, 2.0, (B, T))
  adv = rng.normal(0, 1.5, (B,))
  adv[0] = 0.0
  mask = (rng.random((B, T)) < 0.7).astype(np.float64)
  mask[:, 0] = 0
  mask[-1] = 0  # a pad row
  return logp, old, roll, ref, ent, adv, mask


def reference_loss(logp, old, roll, ref, ent, adv, mask, cfg: losses.LossConfig):
  """Token-by-token transcription of the documented formulas (float64 python)."""
  Bn, Tn = logp.shape
  ntok = mask.sum()
  pg, kl, en = np.zeros((Bn, Tn)), np.zeros((Bn, Tn)), np.zeros((Bn, Tn))
  for b in range(Bn):
    for t in range(Tn):
      if not mask[b, t]:
        continue
      r = math.exp(logp[b, t] - old[b, t])
      a = adv[b]
      clipped = min(max(r, 1 - cfg.eps_low), 1 + cfg.eps_high)
      loss = max(-a * r, -a * clipped)
      if cfg.tis_cap is not None:
        loss *= min(max(math.exp(old[b, t] - roll[b, t]), 0.0), cfg.tis_cap)
      pg[b, t] = loss
      d = logp[b, t] - ref[b, t]
      kl[b, t] = {"k1": d, "k2": d * d / 2, "k3": min(max(math.exp(-d) - 1 + d, -10), 10)}[
        cfg.kl_estimator
      ]
      en[b, t] = ent[b, t]

  def agg(x):
    if cfg.aggregation == "token_mean":
      return (x * mask).sum() / ntok
    if cfg.aggregation == "seq_mean_token_mean":
      return sum((x[b] * mask[b]).sum() / max(mask[b].sum(), 1) for b in range(Bn)) / Bn
    if cfg.aggregation == "seq_mean_token_sum":
      return (x * mask).sum() / Bn
    norm = cfg.norm_constant or Tn
    return (x * mask).sum() / (Bn * norm)

  return agg(pg) + cfg.kl_coef * agg(kl) - cfg.entropy_coef * agg(en)


def _loss(cfg, data):
  logp, old, roll, ref, ent, adv, mask = (jnp.asarray(x, jnp.float32) for x in data)
  loss, stats = losses.policy_loss(
    logp,
    old,
    roll,
    adv,
    mask,
    cfg,
    global_batch=B,
    global_tokens=jnp.sum(mask),
    ref_logp_BT=ref,
    entropy_BT=ent,
  )
  return float(loss), stats


VARIANTS = [
  dict(aggregation=a, tis_cap=tis, kl_coef=kc, kl_estimator=ke)
  for a, tis, (kc, ke) in itertools.product(
    losses.AGGREGATIONS, (2.0, None), ((0.0, "k3"), (0.3, "k1"), (0.3, "k2"), (0.3, "k3"))
  )
] + [
  dict(eps_low=0.1, eps_high=0.1),
  dict(entropy_coef=0.05),
  dict(tis_cap=1.2),
  dict(aggregation="constant_norm", norm_constant=20),
]


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_loss_matches_reference_formula(kw):
  cfg = losses.LossConfig(**kw)
  data = _batch()
  got, _ = _loss(cfg, data)
  want = reference_loss(*data, cfg)
  assert abs(got - want) <= 1e-6 * max(1.0, abs(want)), (got, want)


def test_statistics_count_clipping_at_both_bounds_and_tis_cap():
  cfg = losses.LossConfig()
  logp, old, roll, ref, ent, adv, mask = data = _batch()
  _, stats = _loss(cfg, data)
  r = np.exp(logp - old)
  m = mask > 0
  low = m & (adv[:, None] < 0) & (r < 1 - cfg.eps_low)
  high = m & (adv[:, None] > 0) & (r > 1 + cfg.eps_high)
  assert low.sum() > 0 and high.sum() > 0, "the batch must exercise both clip bounds"
  assert float(stats["clip_count"]) == low.sum() + high.sum()
  tis_over = m & (np.exp(old - roll) > cfg.tis_cap)
  assert 0 < tis_over.sum() < m.sum()
  assert float(stats["tis_clipped_count"]) == tis_over.sum()
  assert float(stats["tokens"]) == m.sum()
  w = np.minimum(np.exp(old - roll), cfg.tis_cap)
  np.testing.assert_allclose(float(stats["tis_weight_sum"]), (w * m).sum(), rtol=1e-6)
  fin = losses.finalize_stats(stats)
  np.testing.assert_allclose(
    float(fin["train/clip_frac"]), (low.sum() + high.sum()) / m.sum(), rtol=1e-6
  )
  np.testing.assert_allclose(float(fin["train/entropy"]), (ent * m).sum() / m.sum(), rtol=1e-6)


def test_micro_batch_losses_sum_to_full_batch_loss():
  for agg in losses.AGGREGATIONS:
    cfg = losses.LossConfig(aggregation=agg, kl_coef=0.1)
    logp, old, roll, ref, ent, adv, mask = (jnp.asarray(x, jnp.float32) for x in _batch(3))
    kw = dict(global_batch=B, global_tokens=jnp.sum(mask))
    full, _ = losses.policy_loss(logp, old, roll, adv, mask, cfg, ref_logp_BT=ref, **kw)
    parts = [
      losses.policy_loss(
        logp[i::2], old[i::2], roll[i::2], adv[i::2], mask[i::2], cfg, ref_logp_BT=ref[i::2], **kw
      )[0]
      for i in range(2)
    ]
    np.testing.assert_allclose(float(sum(parts)), float(full), rtol=1e-6, err_msg=agg)


def test_ratio_one_gradient_is_plain_policy_gradient():
  """With logp_old = logp = logp_rollout nothing is clipped or reweighted: d loss / d logp is
  -A * mask / (len * B) for the default aggregation (the SPADE update's case)."""
  logp, _, _, _, _, adv, mask = _batch(1)
  logp, adv, mask = (jnp.asarray(x, jnp.float32) for x in (logp, adv, mask))
  length = jnp.maximum(mask.sum(1, keepdims=True), 1.0)
  want = -adv[:, None] * mask / length / B
  cfg = losses.LossConfig()

  def f(lp):
    return losses.policy_loss(
      lp, lp, jax.lax.stop_gradient(lp), adv, mask, cfg, global_batch=B, global_tokens=mask.sum()
    )[0]

  np.testing.assert_allclose(jax.grad(f)(logp), want, atol=1e-7)


def test_masked_out_extreme_values_do_not_poison_loss_or_gradient():
  logp, old, roll, ref, ent, adv, mask = (np.array(x, np.float32) for x in _batch(2))
  roll[mask == 0] = -1e30  # off-mask garbage must not produce inf * 0 = nan
  cfg = losses.LossConfig(kl_coef=0.1)

  def f(lp):
    return losses.policy_loss(
      lp, old, roll, adv, mask, cfg, global_batch=B, global_tokens=mask.sum(), ref_logp_BT=ref
    )[0]

  val, grad = jax.value_and_grad(f)(jnp.asarray(logp))
  assert np.isfinite(float(val)) and np.all(np.isfinite(np.asarray(grad)))
  assert np.all(np.asarray(grad)[mask == 0] == 0)


def test_config_validation():
  with pytest.raises(ValueError, match="aggregation"):
    losses.LossConfig(aggregation="mean")
  with pytest.raises(ValueError, match="kl_estimator"):
    losses.LossConfig(kl_estimator="k4")
  with pytest.raises(ValueError, match="norm_constant"):
    losses.LossConfig(norm_constant=0)
  with pytest.raises(ValueError, match="needs reference"):
    cfg = losses.LossConfig(kl_coef=0.1)
    x = jnp.zeros((2, 3))
    losses.policy_loss(
      x, x, x, jnp.zeros(2), jnp.ones((2, 3)), cfg, global_batch=2, global_tokens=6.0
    )


# ---------------------------------------------------------------- chunked log-softmax

VOCAB, LB, LT = 301, 3, 13


@pytest.fixture(scope="module")
def model():
  cfg = TransformerConfig(
    vocab_size=VOCAB,
    embed_dim=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
    mlp_dim=48,
  )
  return Transformer(cfg, rngs=nnx.Rngs(7))


def _naive_logprobs(model, tokens, temperature):
  logits = model(tokens) / temperature
  logsm = jax.nn.log_softmax(logits[:, :-1], axis=-1)
  picked = jnp.take_along_axis(logsm, tokens[:, 1:, None], -1)[..., 0]
  ent = -jnp.sum(jnp.exp(logsm) * logsm, -1)
  pad = jnp.zeros((tokens.shape[0], 1))
  return jnp.concatenate([pad, picked], 1), jnp.concatenate([pad, ent], 1)


@pytest.mark.parametrize("chunk,temperature", [(5, 0.7), (12, 1.0), (100, 1.3)])
def test_chunked_logprobs_match_naive(model, chunk, temperature):
  tokens = jax.random.randint(jax.random.PRNGKey(chunk), (LB, LT), 0, VOCAB)
  cfg = losses.LossConfig(temperature=temperature, logprob_chunk=chunk)
  graphdef, params = nnx.split(model)

  @jax.jit
  def both(params):
    m = nnx.merge(graphdef, params)
    return losses.model_logprobs(m, tokens, cfg), _naive_logprobs(m, tokens, temperature)

  (logp, ent), (want_logp, want_ent) = both(params)
  np.testing.assert_allclose(logp, want_logp, atol=2e-5, rtol=1e-5)
  np.testing.assert_allclose(ent, want_ent, atol=2e-5, rtol=1e-5)
  assert np.all(np.asarray(logp[:, 0]) == 0)


def _max_vocab_intermediate(closed_jaxpr):
  """Largest float activation (in elements) with a vocab-sized axis produced anywhere in a
  jaxpr, sub-jaxprs included (the [V, D] / [D, V] parameter-shaped arrays are not counted)."""
  best = 0

  def visit(jaxpr):
    nonlocal best
    for eqn in jaxpr.eqns:
      for v in eqn.outvars:
        aval = v.aval
        if (
          hasattr(aval, "shape")
          and VOCAB in aval.shape
          and len(aval.shape) > 2
          and jnp.issubdtype(aval.dtype, jnp.floating)
        ):
          best = max(best, math.prod(aval.shape))
      for p in eqn.params.values():
        for sub in p if isinstance(p, tuple | list) else (p,):
          if hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
            visit(sub.jaxpr)
          elif hasattr(sub, "eqns"):
            visit(sub)

  visit(closed_jaxpr.jaxpr)
  return best


def test_chunked_logprobs_gradient_matches_naive_without_full_logits(model):
  """Forward and backward never hold a [B, T, V] float tensor: the largest vocab-sized float
  intermediate is one chunk of logits (the naive version's is the full tensor)."""
  graphdef, params = nnx.split(model)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (LB, 64), 0, VOCAB)
  weights = jax.random.normal(jax.random.PRNGKey(2), tokens.shape)
  chunk = 8
  cfg = losses.LossConfig(temperature=0.8, logprob_chunk=chunk)

  def chunked(p):
    return jnp.sum(losses.model_logprobs(nnx.merge(graphdef, p), tokens, cfg)[0] * weights)

  def naive(p):
    return jnp.sum(_naive_logprobs(nnx.merge(graphdef, p), tokens, 0.8)[0] * weights)

  g1, g2 = jax.jit(jax.grad(chunked))(params), jax.jit(jax.grad(naive))(params)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)
  full = LB * 63 * VOCAB
  assert _max_vocab_intermediate(jax.make_jaxpr(jax.grad(naive))(params)) >= full
  assert _max_vocab_intermediate(jax.make_jaxpr(jax.grad(chunked))(params)) <= LB * chunk * VOCAB
