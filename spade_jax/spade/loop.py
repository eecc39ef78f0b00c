"""One SPADE iteration, and the host state that makes a run exactly resumable.

Step ``s``: at a regeneration step (``s % regen_interval == 0``) the policy designs a new pool
(designer samples go into the delayed buffer); the agent plays the pool (hinted plays too at a
regeneration step); the epochs whose delay has elapsed get their designer rewards from their
whole window; one GRPO update trains on designer samples first, then agent samples. All seeds
derive from ``(config.seed, step, ...)``, and every piece of host state (pool sources, memory,
trackers, delayed buffer, corpus sampler) is serialised with the checkpoint.

Each slot of the pool has a source (new: written by the designer this epoch; carried: the
previous pool replayed; library: the seed pool); solve rates and regret are also reported by
source (`spade.observe`), and ``perf/update_s`` is the update's wall time to its results.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from spade_jax import multihost, trajectories
from spade_jax.spade import observe, rewards, skills
from spade_jax.spade.agent import AgentPlayer
from spade_jax.spade.corpus import CorpusSampler
from spade_jax.spade.delayed import DelayedDesignerBuffer
from spade_jax.spade.designer import Designer, GameEnv
from spade_jax.spade.memory import EnvMemory

POOL_NEW, POOL_CARRIED, POOL_LIBRARY = 0.0, 1.0, 2.0


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  seed: int
  num_games: int
  regen_interval: int
  delay: int
  plays: int
  hint_plays: int
  global_batch: int
  seq_len: int
  reward: rewards.DesignerRewardConfig
  schedule: skills.SkillSchedule


class SpadeLoop:
  def __init__(
    self,
    cfg: LoopConfig,
    designer: Designer,
    player: AgentPlayer,
    update,
    memory: EnvMemory | None,
    corpus: CorpusSampler | None,
  ):
    self.cfg, self.designer, self.player, self.update = cfg, designer, player, update
    self.memory, self.corpus = memory, corpus
    self.buffer = DelayedDesignerBuffer(
      cfg.regen_interval, cfg.num_games, cfg.plays, cfg.hint_plays, delay=cfg.delay
    )
    self.tracker = rewards.LPTracker.create()
    self.games: list[GameEnv | None] = [None] * cfg.num_games
    self.source_G: list[float] = [-1.0] * cfg.num_games  # POOL_* per slot (-1: empty)
    self.epoch_sources: dict[int, list[float]] = {}  # gen_step -> source_G, until trained
    n_agent = cfg.num_games * cfg.plays
    self.scale = rewards.reward_scale(
      n_agent, cfg.num_games, cfg.regen_interval, cfg.reward.scale_cap
    )

  # ------------------------------------------------------------------------------ one step
  def step(self, step: int, state, *, final: bool = False):
    cfg = self.cfg
    metrics: dict[str, float] = {}
    t0 = time.perf_counter()
    offset = step % cfg.regen_interval
    if offset == 0:
      metrics.update(self._regenerate(step, state.params))
    plays = self.player.play(step=step, seed=cfg.seed, with_hints=offset == 0, params=state.params)
    metrics.update(plays.metrics)
    metrics.update(observe.solve_by_source(plays.returns_GP, plays.valid_GP, self.source_G))
    self.buffer.record_plays(step, plays.returns_GP, plays.valid_GP, plays.crashed_G)
    if offset == 0:
      self.buffer.record_hint_plays(
        step, plays.hint_returns_GH, plays.hint_valid_GH, plays.crashed_G
      )
      solved = (plays.returns_GP >= 1.0)[plays.valid_GP]
      metrics["designer/difficulty"] = float(1.0 - solved.mean()) if solved.size else 0.0
    due = self.buffer.pop_due(step) + (self.buffer.flush() if final else [])
    designer_batch, dmetrics = self._designer_batch(step, due)
    metrics.update(dmetrics)
    seq_len = cfg.seq_len or _bucket(
      max([b.seq_len for b in (designer_batch, plays.agent_batch) if b is not None], default=1)
    )
    batch, trimmed = trajectories.mixed_batch(
      designer_batch, plays.agent_batch, cfg.global_batch, seq_len
    )
    segments = batch
    if not cfg.seq_len and designer_batch is not None and plays.agent_batch is not None:
      # the designer's long rows and the agent's short ones each at their own length
      segments = trajectories.length_segments(
        batch,
        designer_batch.batch_size,
        (_bucket(designer_batch.seq_len), _bucket(plays.agent_batch.seq_len)),
      )
    metrics["train/segments"] = float(len(segments) if isinstance(segments, tuple) else 1)
    metrics["train/trimmed_samples"] = float(trimmed)
    t = time.perf_counter()
    state, device_metrics = self.update(state, segments)
    metrics["perf/update_dispatch_s"] = time.perf_counter() - t
    jax.block_until_ready(device_metrics)
    metrics["perf/update_s"] = time.perf_counter() - t
    metrics["perf/host_step_s"] = time.perf_counter() - t0
    tokens = float(np.asarray(batch.loss_mask_BT).sum())
    metrics["train/batch_loss_tokens"] = tokens
    return state, device_metrics, metrics, plays.transcripts

  def _regenerate(self, step: int, params) -> dict:
    cfg = self.cfg
    epoch = step // cfg.regen_interval
    names = list(skills.assign_skills(epoch, cfg.num_games, cfg.schedule))
    if not rewards.trains_designer(cfg.reward):  # fixed pool: the library, no designer
      games, samples, metrics = None, [], {}
    else:
      games, samples, metrics = self.designer.design(
        gen_step=step,
        skills=names,
        memory=self.memory,
        corpus=self.corpus,
        seed=cfg.seed,
        params=params,
      )
    self.buffer.open_epoch(step, names, samples)
    if games is not None and any(g is not None for g in games):
      self.games, source = games, POOL_NEW
    elif any(g is not None for g in self.games):
      source = POOL_CARRIED  # nothing validated: the agent replays the previous pool
    else:
      self.games, lib_metrics = self.designer.library_pool(
        gen_step=step, skills=names, seed=cfg.seed, params=params
      )
      metrics.update({k: v for k, v in lib_metrics.items() if k.startswith("perf/")})
      source = POOL_LIBRARY
    metrics["agent/pool_source"] = source
    self.source_G = [-1.0 if g is None else source for g in self.games]
    self.epoch_sources[step] = list(self.source_G)
    self.player.load(self.games)
    return metrics

  def _designer_batch(self, step: int, due) -> tuple:
    if not due:
      return None, {}
    toks, masks, lps, rew, adv, groups = [], [], [], [], [], []
    regrets, raws, wins, by_source = [], [], [], []
    for epoch in due:
      sources = self.epoch_sources.pop(epoch.gen_step, None)
      if sources is not None:
        by_source.append(observe.regret_by_source(epoch.window, sources))
      out = epoch.rewards(self.tracker, self.scale, self.cfg.reward)
      self.tracker = out.tracker
      reward_G, raw_G, regret_G, win_G = (
        np.asarray(x)
        for x in multihost.to_host((out.reward_G, out.raw_G, out.regret_G, out.win_rate_G))
      )
      valid_G = epoch.valid_G
      regrets += regret_G[valid_G].tolist()
      raws += raw_G[valid_G].tolist()
      wins += win_G[valid_G].tolist()
      for s in epoch.samples:
        g = s["game"]
        if g < 0:
          continue  # a rejected attempt gets no gradient
        toks.append(s["prompt"] + s["response"])
        masks.append([0] * len(s["prompt"]) + s["mask"])
        lps.append([0.0] * len(s["prompt"]) + s["logprobs"])
        rew.append(float(raw_G[g]))
        adv.append(float(reward_G[g]))
        groups.append(g)
        self.designer.update_record(
          s["stem"] + ".py",
          win_rate=float(win_G[g]),
          regret=float(regret_G[g]),
          designer_reward=float(reward_G[g]),
          trained_at_step=step,
        )
        if self.memory is not None:
          source = (self.designer.envs_dir / (s["stem"] + ".py")).read_text()
          self.memory.add(
            source=source,
            skill=s["skill"],
            win_rate=float(win_G[g]),
            regret=float(regret_G[g]),
            step=epoch.gen_step,
          )
    metrics = {
      "designer/regret_mean": float(np.mean(regrets)) if regrets else 0.0,
      "designer/raw_reward_mean": float(np.mean(raws)) if raws else 0.0,
      "designer/reward_mean": float(np.mean(adv)) if adv else 0.0,
      "designer/pool_win_rate": float(np.mean(wins)) if wins else 0.0,
      "designer/trained_samples": float(len(toks)),
    }
    metrics.update(observe.merge_by_source(by_source))
    if not toks:
      return None, metrics
    batch = trajectories.from_sequences(
      toks,
      masks,
      lps,
      role=trajectories.ROLE_DESIGNER,
      rewards=rew,
      advantages=adv,
      group_id=groups,
    )
    return batch, metrics

  # ------------------------------------------------------------------------------ resume
  def host_state(self) -> dict:
    return {
      "games": [None if g is None else g.to_state() for g in self.games],
      "buffer": self.buffer.to_state(),
      "tracker": self.tracker.to_state(),
      "memory": None if self.memory is None else self.memory.to_state(),
      "corpus": None if self.corpus is None else self.corpus.to_state(),
      "source_G": list(self.source_G),
      "epoch_sources": {str(k): v for k, v in self.epoch_sources.items()},
    }

  def load_host_state(self, state: dict) -> None:
    self.games = [None if g is None else GameEnv.from_state(g) for g in state["games"]]
    self.buffer = DelayedDesignerBuffer.from_state(state["buffer"])
    self.tracker = rewards.LPTracker.from_state(state["tracker"])
    if self.memory is not None and state.get("memory") is not None:
      self.memory = EnvMemory.from_state(state["memory"], self.memory.config)
    if self.corpus is not None and state.get("corpus") is not None:
      self.corpus = CorpusSampler.from_state(self.corpus.documents, state["corpus"])
    self.source_G = list(state.get("source_G", self.source_G))
    self.epoch_sources = {int(k): v for k, v in state.get("epoch_sources", {}).items()}
    self.player.load(self.games)


def _bucket(n: int, smallest: int = 64) -> int:
  """Power-of-two length bucket (few distinct update shapes, so few compilations)."""
  return max(smallest, 1 << max(0, n - 1).bit_length())
