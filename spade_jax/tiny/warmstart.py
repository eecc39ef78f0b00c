"""Warm start of the tiny policy: a short supervised phase standing in for pretraining.

Two kinds of examples, both from the library's *training settings* only (training families at
``level <= warm_start.max_level``; `heldout.training_settings`), never from a held-out setting:

* **designer**: the designer prompt of the family's skill -> the family's program in the
  designer language (every level), then the stop token;
* **agent**: oracle episodes played by the on-device rollout (``DeviceRollout`` with a
  `ScriptedPolicy` that answers every turn with the program's own rendered solution), hinted
  and unhinted, several seeds per program: the correct ``\\boxed{...}`` answer to each task.

The update is the GRPO step itself with advantage 1 on every example and no importance
correction: with one optimizer step per batch the ratio is exactly 1, so the policy-gradient
loss has the gradient of the token-level cross-entropy. The warm start uses its own Adam state
and constant learning rate; the RL phase then starts with fresh optimizer moments, and (with
``train.kl_coef > 0``) the warm-started policy becomes the KL reference.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax import trajectories
from spade_jax.envs.library import FAMILIES
from spade_jax.rl import losses
from spade_jax.rl.optimizer import learning_rate_schedule, make_optimizer
from spade_jax.rl.update import train_step
from spade_jax.tiny.heldout import greedy_rollout, training_settings
from spade_jax.tiny.variants import checked_variants, library_variants


def training_variants(setup, seed: int):
  """The warm start's checked difficulty variants (`tiny.variants`) of the training
  families: ``[(Variant, host EnvProgram)]``."""
  c = setup.config.warm_start
  found = library_variants(
    setup.lang, setup.train_families, c.variants, seed, setup.config.designer.library_hints
  )
  return checked_variants(setup.lang, setup.tok, found, jax.random.PRNGKey(seed))


def designer_examples(setup, variants=()) -> list[tuple[list[int], list[int]]]:
  """``(prompt, response)`` token lists: each training program written for its skill with the
  plain prompt and, when the loop's memory is on (``spade.memory``), once more with another
  program of the same skill as the memory seed (the prompt format the loop then uses once its
  memory holds programs; with memory off the loop never shows it, and those rows, more than
  twice as long as the plain ones, would cost most of the designer's warm-start compute); then
  each of the ``variants`` written for its skill (plain prompt)."""
  stop = setup.tok.eos_ids[0]
  train = training_settings(setup.library, setup.config.warm_start.max_level)
  out = []
  for k, (name, level) in enumerate(train):
    toks = list(setup.library.tokens[(name, level)]) + [stop]
    skill = FAMILIES[name].skill
    out.append((setup.designer_prompt(skill), toks))
    others = sorted(nl for nl in train if nl[0] != name and FAMILIES[nl[0]].skill == skill)
    if others and setup.config.spade.memory:
      seed = setup.library.tokens[others[k % len(others)]]
      prompt = setup.designer_prompt(skill, seed)
      if len(prompt) > len(setup.designer_prompt(skill)):  # the seed fitted
        out.append((prompt, toks))
  for v, _ in variants:
    out.append((setup.designer_prompt(FAMILIES[v.family].skill), list(v.tokens) + [stop]))
  return out


def agent_examples(graphdef, params, setup, seed: int, variants=()):
  """Oracle episodes of the training programs (``episodes_per_program`` each, hinted and
  not) and of the ``variants`` (``variant_episodes`` each) -> host `EpisodeResult`."""
  c = setup.config
  device = greedy_rollout(
    graphdef,
    params,
    setup.tok,
    setup.framing,
    c,
    setup.rollout_spec,
    script_turns=1,
    script_width=c.agent.max_new_tokens,
  )
  programs, seeds, hints = [], [], []
  rng = np.random.default_rng([seed, 5])
  settings = training_settings(setup.library, c.warm_start.max_level)
  sources = [
    (setup.library.by_family[n][lv], c.warm_start.episodes_per_program) for n, lv in settings
  ]
  sources += [(program, c.warm_start.variant_episodes) for _, program in variants]
  for program, n in sources:
    for hinted in (False, True):
      for _ in range(n):
        programs.append(program)
        seeds.append(int(rng.integers(2**31)))
        hints.append(hinted)
  out = device(programs, seeds, hints, oracle=True, params=params)
  return out.episodes(setup.tok, setup.framing)


def _bucket(n: int, step: int = 16) -> int:
  return -(-n // step) * step


def sft_rows(
  designer, episodes, bucket: int = 16
) -> tuple[trajectories.Trajectories, trajectories.Trajectories]:
  """The supervised examples as two host `Trajectories` (designer rows, solved oracle episodes),
  advantage 1, each padded to its own length, the longest row rounded up to a multiple of
  ``bucket`` (agent episodes are much shorter than programs, so one common length would waste
  most of the compute on padding)."""

  def rows(toks, masks):
    n = len(toks)
    return trajectories.from_sequences(
      toks,
      masks,
      [[0.0] * len(t) for t in toks],
      role=trajectories.ROLE_AGENT,
      rewards=[1.0] * n,
      advantages=[1.0] * n,
      seq_len=_bucket(max(len(t) for t in toks), bucket),
    )

  d = rows([p + r for p, r in designer], [[0] * len(p) + [1] * len(r) for p, r in designer])
  solved = [i for i in range(len(episodes.tokens)) if episodes.solved[i]]
  a = rows([episodes.tokens[i] for i in solved], [episodes.loss_mask[i] for i in solved])
  return d, a


def draw_indices(seed: int, steps: int, sizes) -> tuple[np.ndarray, ...]:
  """The rows of every supervised step, drawn up front: one ``[steps, batch]`` index array per
  ``(rows, batch)`` in ``sizes``, drawn in that order within a step, without replacement unless
  a batch exceeds its rows."""
  rng = np.random.default_rng([seed, 11])
  out = tuple(np.zeros((steps, n), np.int32) for _, n in sizes)
  for t in range(steps):
    for k, (rows, n) in enumerate(sizes):
      out[k][t] = rng.choice(rows, size=n, replace=rows < n)
  return out


def sft_steps(step_fn, state, rows, idx):
  """``steps`` supervised steps in one ``lax.scan`` (jit it): per step, for each row kind in
  turn, one `step_fn` update on ``rows[k]`` at ``idx[k][step]`` (rows and indices live on
  device, so the phase is one call, not one per batch). Returns ``(state, nll)``: per kind,
  the mean NLL per trained token at every step."""

  def body(s, idx_t):
    nll = []
    for r, i in zip(rows, idx_t):
      s, m = step_fn(s, jax.tree.map(lambda x, i=i: x[i], r))
      nll.append(m["train/nll"])
    return s, tuple(nll)

  return jax.lax.scan(body, state, idx)


def sft_step(graphdef, setup):
  """The warm start's supervised update, un-jitted (`rl.update.train_step` with its own Adam
  at the constant ``warm_start.learning_rate``), and that optimizer: ``(step_fn, optimizer)``."""
  c = setup.config
  opt_cfg = dataclasses.replace(
    setup.opt_cfg, learning_rate=c.warm_start.learning_rate, schedule="constant", decay_steps=0
  )
  optimizer = make_optimizer(opt_cfg)
  loss_cfg = losses.LossConfig(tis_cap=None, temperature=c.agent.temperature)
  step_fn = functools.partial(
    train_step, graphdef, optimizer, learning_rate_schedule(opt_cfg), loss_cfg
  )
  return step_fn, optimizer


def batch_sizes(config) -> tuple[int, int]:
  """Rows per supervised step: ``(agent, designer)``."""
  return config.warm_start.batch, max(1, config.warm_start.batch // 4)


def warm_start(graphdef, state, setup):
  """Runs ``config.warm_start.steps`` supervised steps (one agent batch, then one designer
  batch, per step); returns ``(state, metrics)``."""
  c = setup.config
  variants = training_variants(setup, c.seed)
  designer = designer_examples(setup, variants)
  episodes = agent_examples(graphdef, state.params, setup, c.seed, variants)
  d_rows, a_rows = sft_rows(designer, episodes)
  step_fn, optimizer = sft_step(graphdef, setup)
  run_step = np.asarray(jax.device_get(state.step))  # the warm state's buffers are donated
  warm = jax.tree.map(jnp.copy, state.replace(opt_state=optimizer.init(state.params)))
  kinds = tuple(zip(("agent", "designer"), (a_rows, d_rows), batch_sizes(c), strict=True))
  idx = draw_indices(c.seed, c.warm_start.steps, [(r.batch_size, n) for _, r, n in kinds])
  nll = {name: [] for name, _, _ in kinds}
  if c.warm_start.steps:
    scan = jax.jit(functools.partial(sft_steps, step_fn), donate_argnums=0)
    warm, out = scan(warm, jax.device_put(tuple(r for _, r, _ in kinds)), jax.device_put(idx))
    nll = {name: v for (name, _, _), v in zip(kinds, out)}
  nll = {k: [float(x) for x in jax.device_get(v)] for k, v in nll.items()}
  run_opt = make_optimizer(setup.opt_cfg)
  state = warm.replace(
    step=jnp.asarray(run_step),
    opt_state=run_opt.init(warm.params),
    # the KL reference (if any) is the warm-started policy, the RL phase's starting point
    ref_params=None if warm.ref_params is None else jax.tree.map(jnp.copy, warm.params),
  )
  metrics = {
    "warm/steps": c.warm_start.steps,
    "warm/variants": len(variants),
    "warm/designer_examples": d_rows.batch_size,
    "warm/agent_examples": a_rows.batch_size,
    "warm/oracle_solve_rate": float(np.mean(episodes.solved)) if len(episodes.solved) else 0.0,
  }
  for name, v in nll.items():  # mean negative log-likelihood per trained token
    if v:
      metrics[f"warm/{name}_nll_first"] = v[0]
      metrics[f"warm/{name}_nll_last"] = float(np.mean(v[-10:]))
  return state, metrics
