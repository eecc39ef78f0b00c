"""The jitted GRPO update: compile-once, donation, finite differences, sharding parity,
gradient accumulation, the non-finite guard, and a from-scratch learning run."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax import sharding
from spade_jax import trajectories as tj
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl import advantages, losses, train_state, update
from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer

CFG = TransformerConfig(
  vocab_size=64, embed_dim=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64
)
# Every loss path on: TIS (with some weights capped), KL to a reference, entropy bonus.
LOSS = losses.LossConfig(kl_coef=0.05, entropy_coef=0.01, temperature=0.9, logprob_chunk=5)
OPT = OptimizerConfig(learning_rate=1e-3, eps=1e-6)
B, T = 16, 12


def _batch(seed=0) -> tj.Trajectories:
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, CFG.vocab_size, (B, T))
  lengths = rng.integers(6, T + 1, B)
  toks, masks, lps = [], [], []
  for b in range(B):
    n = lengths[b]
    mask = (np.arange(n) >= 3).astype(float)
    mask[5:7] = 0  # an environment segment inside an agent sample
    toks.append(tokens[b, :n].tolist())
    masks.append(mask.tolist())
    lps.append((-rng.uniform(2.5, 5.5, n)).tolist())  # w = exp(old - rollout) on both sides of 2
  role = [tj.ROLE_DESIGNER] * 4 + [tj.ROLE_AGENT] * 10
  batch = tj.from_sequences(
    toks[:14],
    masks[:14],
    lps[:14],
    role=role,
    rewards=rng.integers(0, 2, 14),
    group_id=np.arange(14) % 3,
    seq_len=T,
  )
  batch = tj.pad_batch(batch, B)
  adv_B = np.zeros(B, np.float32)  # designer: group-centred; agent: z-scored, per group
  for role, mode in ((tj.ROLE_DESIGNER, "center"), (tj.ROLE_AGENT, "zscore")):
    for g in range(3):
      sel = np.flatnonzero(batch.valid_B & (batch.role_B == role) & (batch.group_id_B == g))
      adv, _ = advantages.group_advantages(
        batch.rewards_B[sel][None], np.ones((1, sel.size), bool), mode=mode
      )
      adv_B[sel] = np.asarray(adv)[0]
  return batch.replace(advantages_B=adv_B)


def _fresh_state(mesh=None):
  model = Transformer(CFG, rngs=nnx.Rngs(0))
  graphdef, state = train_state.create_train_state(
    model, make_optimizer(OPT), seed=1, with_reference=True, mesh=mesh
  )
  # a reference policy different from the initial policy, so the KL term has a gradient
  state = state.replace(ref_params=jax.tree.map(lambda x: x * 1.05, state.ref_params))
  return graphdef, state


def _host(tree):
  return jax.tree.map(np.asarray, tree)


def _max_diff(a, b):
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
  )


@pytest.fixture(scope="module")
def graphdef():
  return _fresh_state()[0]


@pytest.fixture(scope="module")
def step1(graphdef):
  return update.make_update(graphdef, LOSS, OPT)


@pytest.fixture(scope="module")
def unsharded_run(step1):
  """Params after 3 steps, unsharded, single micro-batch (the reference of the parity tests)."""
  _, state = _fresh_state()
  p0 = _host(state.params)
  metrics = []
  for i in range(3):
    state, m = step1(state, _batch(i))
    metrics.append(_host(m))
  return p0, _host(state), metrics


def test_update_compiles_once_and_donates_state(graphdef, step1, unsharded_run):
  assert step1.trace_count == 1  # three calls with three different batches of one shape
  _, state = _fresh_state()
  old_leaf = jax.tree.leaves(state.params)[0]
  state, _ = step1(state, _batch(5))
  assert old_leaf.is_deleted(), "the state must be donated"
  assert step1.trace_count == 1
  small = tj.Trajectories(*[np.asarray(x)[:8] for x in jax.tree.leaves(_batch(5))])
  step1(state, small)
  assert step1.trace_count == 2  # a new shape traces again


def test_update_metrics_and_progress(unsharded_run):
  p0, final, metrics = unsharded_run
  assert int(final.step) == 3
  assert _max_diff(p0, final.params) > 1e-3  # the parameters moved
  m = metrics[0]
  batch = _batch(0)
  assert m["train/loss_tokens"] == batch.num_loss_tokens()
  assert m["train/designer_samples"] == 4 and m["train/agent_samples"] == 10
  assert m["train/update_skipped"] == 0 and m["train/lr"] == pytest.approx(1e-3)
  assert 0 < m["train/tis_clipped_frac"] < 1  # some TIS weights hit the cap of 2
  assert m["train/clip_frac"] == 0  # one step per batch: ratio 1, nothing clipped
  assert m["train/ref_kl"] > 0 and m["train/entropy"] > 0 and m["train/grad_norm"] > 0
  assert all(np.isfinite(v) for v in m.values())


def test_gradient_matches_finite_differences(graphdef):
  """The update's gradient (two micro-batches, old log-probs as stop-gradient of the same
  forward) against central differences of the loss with old log-probs frozen at p0."""
  _, state = _fresh_state()
  batch = jax.tree.map(jnp.asarray, _batch(7))
  params, ref = state.params, state.ref_params
  model = nnx.merge(graphdef, params)
  old_logp, _ = losses.model_logprobs(model, batch.tokens_BT, LOSS)
  gb, gt = float(B), jnp.sum(batch.loss_mask_BT)

  @jax.jit
  def loss_at(p):
    return update.batch_loss(
      graphdef,
      p,
      batch,
      LOSS,
      global_batch=gb,
      global_tokens=gt,
      ref_params=ref,
      old_logp_BT=old_logp,
    )[0]

  grads, _ = jax.jit(
    lambda p: update.loss_and_grads(graphdef, p, batch, LOSS, micro_batches=2, ref_params=ref)
  )(params)
  rng = np.random.default_rng(0)
  leaves, treedef = jax.tree.flatten(params)
  grad_leaves = [np.asarray(g) for g in jax.tree.leaves(grads)]
  names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
  checks = [None] + [
    names.index(n)
    for n in names
    if "lm_head" in n or "'q'" in n or "attn_norm" in n or "embed" in n or "'down'" in n
  ]
  h = 1e-2
  for only in checks:
    # half along the gradient (signal), half random (probes the other directions)
    direction = []
    for i, (x, g) in enumerate(zip(leaves, grad_leaves)):
      if only is not None and i != only:
        direction.append(np.zeros(x.shape, np.float32))
        continue
      r = rng.normal(size=x.shape)
      direction.append(r / np.linalg.norm(r) + g / np.linalg.norm(g))
    norm = np.sqrt(sum(float(np.sum(d * d)) for d in direction))
    direction = jax.tree.unflatten(treedef, [jnp.asarray(d / norm, jnp.float32) for d in direction])
    plus = jax.tree.map(lambda p, d: p + h * d, params, direction)
    minus = jax.tree.map(lambda p, d: p - h * d, params, direction)
    fd = (float(loss_at(plus)) - float(loss_at(minus))) / (2 * h)
    an = sum(
      float(jnp.sum(g * d)) for g, d in zip(jax.tree.leaves(grads), jax.tree.leaves(direction))
    )
    assert abs(an) > 1e-4, "direction with no signal"
    assert fd == pytest.approx(an, rel=2e-2, abs=2e-5), (only and names[only], fd, an)


@pytest.mark.parametrize("mesh_shape", [(1, 8, 1), (1, 4, 2)])
def test_sharded_update_matches_unsharded(graphdef, unsharded_run, mesh_shape):
  _, want, _ = unsharded_run
  mesh = sharding.make_mesh(mesh_shape)
  _, state = _fresh_state(mesh)
  step = update.make_update(graphdef, LOSS, OPT, mesh=mesh, state=state)
  for i in range(3):
    batch = jax.device_put(_batch(i), tj.shardings(mesh, _batch(i)))
    state, _ = step(state, batch)
  assert step.trace_count == 1
  embed = state.params["embed"][...]
  assert len(embed.sharding.device_set) == 8 and not embed.sharding.is_fully_replicated
  assert _max_diff(state.params, want.params) < 1e-5
  assert _max_diff(state.opt_state, want.opt_state) < 1e-5


def test_gradient_accumulation_equals_one_big_batch(graphdef, unsharded_run):
  _, want, _ = unsharded_run
  step4 = update.make_update(graphdef, LOSS, OPT, micro_batches=4)
  _, state = _fresh_state()
  for i in range(3):
    state, m = step4(state, _batch(i))
  assert _max_diff(state.params, want.params) < 1e-5
  with pytest.raises(ValueError, match="not divisible"):
    update.split_micro_batches(_batch(0), 3)


def test_non_finite_update_is_skipped_and_reported(step1):
  _, state = _fresh_state()
  before = _host(state)
  bad = _batch(0)
  bad.advantages_B[2] = np.nan
  state, m = step1(state, bad)
  assert float(m["train/update_skipped"]) == 1.0
  assert int(state.step) == 1
  assert _max_diff(state.params, before.params) == 0
  assert _max_diff(state.opt_state, before.opt_state) == 0
  state, m = step1(state, _batch(0))  # the next good batch is applied normally
  assert float(m["train/update_skipped"]) == 0.0
  assert _max_diff(state.params, before.params) > 0


def test_no_reference_forward_when_kl_coef_is_zero(graphdef):
  _, state = _fresh_state()
  batch = _batch(0)

  def count_dots(cfg, ref):
    s = state.replace(ref_params=ref)
    fn = lambda s, b: update.train_step(graphdef, make_optimizer(OPT), lambda c: 0.0, cfg, s, b)
    text = str(jax.make_jaxpr(fn)(s, batch))
    return text.count("dot_general")

  with_kl = count_dots(LOSS, state.ref_params)
  without = count_dots(losses.LossConfig(), None)
  assert with_kl > without
  with pytest.raises(ValueError, match="ref_params"):
    count_dots(LOSS, None)


def test_bf16_compute_keeps_f32_master_weights(graphdef, unsharded_run):
  _, _, metrics = unsharded_run
  cfg16 = CFG.replace(dtype=jnp.bfloat16)
  model = Transformer(cfg16, rngs=nnx.Rngs(0))
  g16, state = train_state.create_train_state(
    model, make_optimizer(OPT), seed=1, with_reference=True
  )
  state = state.replace(ref_params=jax.tree.map(lambda x: x * 1.05, state.ref_params))
  state, m = update.make_update(g16, LOSS, OPT)(state, _batch(0))
  assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
  assert {x.dtype for x in jax.tree.leaves(state.opt_state) if x.ndim} == {jnp.dtype(jnp.float32)}
  assert float(m["train/loss"]) == pytest.approx(metrics[0]["train/loss"], rel=0.05, abs=2e-3)


# ------------------------------------------------------------------------------ learning

BOS, PLUS, EQ, DIGIT0 = 31, 29, 30, 19  # answer tokens are 0..18, digits 19..28


def test_grpo_learns_digit_addition_from_scratch():
  """A 2-layer model trained only by this update to answer a + b (one sampled token out of a
  40-token vocabulary; reward 1 if correct) climbs from chance (1/40) to >= 0.8 mean reward.

  The learning rate (2e-3) is far above the paper's 1e-6: the model is tiny and starts from
  random weights. A small entropy bonus keeps prompts whose answers collapsed early
  explorable. All 100 prompts are played 8 times per step (groups of 8)."""
  cfg = TransformerConfig(
    vocab_size=40, embed_dim=64, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=16, mlp_dim=128
  )
  opt_cfg = OptimizerConfig(learning_rate=2e-3)
  loss_cfg = losses.LossConfig(entropy_coef=0.03)
  graphdef, state = train_state.create_train_state(
    Transformer(cfg, rngs=nnx.Rngs(0)), make_optimizer(opt_cfg)
  )
  step = update.make_update(graphdef, loss_cfg, opt_cfg)
  group = 8
  a_P, b_P = np.divmod(np.arange(100), 10)
  a_B, b_B = np.repeat(a_P, group), np.repeat(b_P, group)
  n = a_B.size
  prompt_BT = np.stack(
    [np.full(n, BOS), a_B + DIGIT0, np.full(n, PLUS), b_B + DIGIT0, np.full(n, EQ)], 1
  ).astype(np.int32)

  @jax.jit
  def rollout(params, key):
    logits_BV = nnx.merge(graphdef, params)(prompt_BT)[:, -1] / loss_cfg.temperature
    answer_B = jax.random.categorical(key, logits_BV).astype(jnp.int32)
    logp_B = jnp.take_along_axis(jax.nn.log_softmax(logits_BV), answer_B[:, None], 1)[:, 0]
    reward_B = (answer_B == a_B + b_B).astype(jnp.float32)
    group_B = jnp.arange(n) // group
    role_B = jnp.full((n,), tj.ROLE_AGENT, jnp.int32)
    valid_B = jnp.ones((n,), bool)
    return tj.Trajectories(
      tokens_BT=jnp.concatenate([prompt_BT, answer_B[:, None]], 1),
      loss_mask_BT=jnp.zeros((n, 6)).at[:, 5].set(1.0),
      rollout_logprobs_BT=jnp.zeros((n, 6)).at[:, 5].set(logp_B),
      advantages_B=advantages.group_advantages(
        reward_B.reshape(-1, group), valid_B.reshape(-1, group)
      )[0].reshape(-1),
      role_B=role_B,
      rewards_B=reward_B,
      group_id_B=group_B,
      valid_B=valid_B,
      turns_B=jnp.ones((n,), jnp.int32),
    )

  key = jax.random.PRNGKey(0)
  rewards = []
  for _ in range(400):
    key, sub = jax.random.split(key)
    batch = rollout(state.params, sub)
    state, _ = step(state, batch)
    rewards.append(float(jnp.mean(batch.rewards_B)))
    if len(rewards) >= 10 and np.mean(rewards[-10:]) >= 0.8:
      break
  assert np.mean(rewards[:3]) < 0.1, rewards[:3]
  assert np.mean(rewards[-10:]) >= 0.8, (len(rewards), rewards[-10:])
  assert step.trace_count == 1


def test_segments_equal_one_padded_batch(graphdef):
  """Rows of two lengths trained as segments give the loss, gradient and statistics of the same
  rows padded to one length and concatenated (every aggregation; micro-batches too)."""
  _, state = _fresh_state()
  full = _batch(0)
  long = jax.tree.map(lambda x: x[:8], full)
  short = jax.tree.map(lambda x: x[8:, :7] if x.ndim == 2 else x[8:], full)
  pad = lambda x: jnp.pad(x, ((0, 0), (0, T - x.shape[1]))) if x.ndim == 2 else x
  padded = jax.tree.map(lambda a, b: jnp.concatenate([a, pad(b)]), long, short)
  assert short.loss_mask_BT.sum() > 0 and short.seq_len < padded.seq_len
  grads = jax.jit(
    lambda p, r, b, cfg, micro: update.loss_and_grads(
      graphdef, p, b, cfg, micro_batches=micro, ref_params=r
    ),
    static_argnums=(3, 4),
  )
  cases = [(a, 1) for a in losses.AGGREGATIONS] + [(LOSS.aggregation, 2)]
  for aggregation, micro in cases:
    cfg = dataclasses.replace(LOSS, aggregation=aggregation)
    got = grads(state.params, state.ref_params, (long, short), cfg, micro)
    want = grads(state.params, state.ref_params, padded, cfg, micro)
    assert _max_diff(got[0], want[0]) < 1e-6, aggregation
    assert set(got[1]) == set(want[1])
    for k in got[1]:  # sums over ~200 tokens: relative tolerance
      np.testing.assert_allclose(got[1][k], want[1][k], rtol=1e-6, atol=1e-6, err_msg=k)
  m_got, m_want = update._batch_metrics((long, short)), update._batch_metrics(padded)
  assert set(m_got) == set(m_want) and _max_diff(m_got, m_want) < 1e-6


def test_micro_batches_of_a_segment():
  """A segment takes the configured micro-batches its rows allow, and more when a token bound
  is set and the rows divide."""
  assert update.segment_micro_batches(16, 512, 1, 0) == 1
  assert update.segment_micro_batches(16, 512, 4, 0) == 4
  assert update.segment_micro_batches(2, 4096, 4, 0) == 2  # gcd: 2 rows, 4 asked
  assert update.segment_micro_batches(1, 4096, 4, 8192) == 1
  assert update.segment_micro_batches(4, 4096, 1, 8192) == 2
  assert update.segment_micro_batches(8, 4096, 1, 4096) == 8
  assert update.segment_micro_batches(6, 4096, 1, 4096) == 6  # one row each
  assert update.segment_micro_batches(6, 2048, 1, 4096) == 3  # not a power of two
  assert update.segment_micro_batches(15, 1024, 1, 8192) == 3  # beside one designer row
  assert update.segment_micro_batches(15, 1024, 1, 1000) == 15  # a row over the bound
  assert update.segment_micro_batches(12, 1024, 2, 4096) == 4  # a multiple of gcd(2, 12)


def test_length_segments_split_and_train_like_the_padded_batch(graphdef):
  """The SPADE loop's split of designer rows (first) and agent rows: rows [0, s) with s the
  power of two >= the designer rows, each part at its own length; loss and gradient equal the
  padded batch's, with and without a token bound on micro-batches."""
  _, state = _fresh_state()
  full = _batch(0)  # 4 designer rows first, then agent rows: cut the agent rows to 7 tokens
  full = full.replace(
    loss_mask_BT=np.where(np.arange(T)[None] >= 7, 0.0, full.loss_mask_BT)
    * (np.arange(B) >= 4)[:, None]
    + np.asarray(full.loss_mask_BT) * (np.arange(B) < 4)[:, None]
  )
  assert tj.length_segments(full, 0, (T, 7)) is full
  assert tj.length_segments(full, 16, (T, 7)) is full
  assert tj.length_segments(full, 4, (7, 7)) is full
  three = tj.length_segments(full, 3, (T, 7))  # 3 designer rows: the split rounds up to 4
  assert [p.batch_size for p in three] == [4, 12] and [p.seq_len for p in three] == [T, 7]
  with pytest.raises(ValueError, match="beyond"):
    tj.length_segments(full, 4, (6, 6 + 1))
  segs = tj.length_segments(full, 4, (T, 8))
  assert [p.seq_len for p in segs] == [T, 8]
  grads = jax.jit(
    lambda p, r, b, tokens: update.loss_and_grads(
      graphdef, p, b, LOSS, micro_tokens=tokens, ref_params=r
    ),
    static_argnums=(3,),
  )
  want = grads(state.params, state.ref_params, full, 0)
  for tokens in (0, 2 * T):  # 2 * T: the 4 long rows in micro-batches of 2
    got = grads(state.params, state.ref_params, segs, tokens)
    assert _max_diff(got[0], want[0]) < 1e-6, tokens
    for k in want[1]:
      np.testing.assert_allclose(got[1][k], want[1][k], rtol=1e-6, atol=1e-6, err_msg=k)
