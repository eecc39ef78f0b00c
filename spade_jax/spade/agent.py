"""The agent side of a SPADE iteration: plays of the current pool, hinted and unhinted.

Every valid game is played ``plays`` times without the hint at every step of its window, and
``hint_plays`` times with the hint at the pool's first step, on the *same* seeds as the first
unhinted plays (matched problem instances, identical decoding), so regret compares like with
like; hinted plays beyond ``plays`` (the tool-use recipe plays 16 hinted) take the seeds the
unhinted plays would have had with more plays. Seeds are explicit per (run seed, step, game, play). Games whose translation passed the
differential check are played by the on-device rollout (`rollout.device.DeviceRollout`: the
whole multi-turn episode in one jitted loop, the program interpreted on device); the others,
and translated games whose first message does not fit the device templates, run through the
host loop with sandboxed Python. Both paths return the same `EpisodeResult`, merged back in
episode order. An environment failure (a sandbox error, or an interpreter fault on device)
scores 0 and drops the episode from the agent batch; it penalises the designer unless it was
collateral (another env killed the shared worker).

Advantages are per game (`rl.advantages.group_advantages`, mode ``advantage``). With
``dynamic_sampling`` (DAPO), games whose kept returns all agree (advantage 0) are dropped from the
agent batch, which is refilled with further rounds of unhinted plays of the whole pool on fresh
seeds until it holds one informative group per valid game, or ``dynamic_rounds`` rounds (the
first included) have been played. Only the first round's plays enter the metrics, the transcripts
and the designer's replay window: the extra rounds feed the agent batch alone.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from spade_jax import trajectories
from spade_jax.engine.generate import Engine
from spade_jax.envs.ir.checks import ProgramError
from spade_jax.envs.ir.text import TemplateError
from spade_jax.envs.sandbox.pool import EnvError, SandboxPool
from spade_jax.rl import advantages
from spade_jax.rollout import host as host_rollout
from spade_jax.rollout.chat import ChatFraming
from spade_jax.spade import prompts
from spade_jax.spade.designer import GameEnv, derive_seed
from spade_jax.tokenizer import Tokenizer


def rollout_config(agent) -> host_rollout.RolloutConfig:
  """The rollout settings of an ``agent`` config section."""
  return host_rollout.RolloutConfig(
    max_turns=agent.max_turns,
    max_new_tokens=agent.max_new_tokens,
    max_context=agent.max_context,
    temperature=agent.temperature,
    top_p=agent.top_p,
    top_k=agent.top_k,
  )


@dataclasses.dataclass
class PoolPlays:
  """Outcomes of one step's plays of the pool (G games, P plays, H hinted plays)."""

  returns_GP: np.ndarray
  valid_GP: np.ndarray
  crashed_GP: np.ndarray  # the designer's fault
  turns_GP: np.ndarray
  hint_returns_GH: np.ndarray | None
  hint_valid_GH: np.ndarray | None
  hint_crashed_GH: np.ndarray | None
  crashed_G: np.ndarray
  agent_batch: trajectories.Trajectories | None  # kept unhinted plays with advantages
  metrics: dict
  transcripts: list


class AgentPlayer:
  def __init__(
    self,
    engine: Engine,
    tok: Tokenizer,
    rollout: host_rollout.RolloutConfig,
    pool: SandboxPool,
    plays: int,
    hint_plays: int,
    device=None,
    *,
    advantage: str = "zscore",
    dynamic_sampling: bool = False,
    dynamic_rounds: int = 3,
    framing=None,
    wave: int = 0,
  ):
    """``device``: a `rollout.device.DeviceRollout` for translated games (None: all on host).
    ``advantage``: `rl.advantages.MODES`; ``dynamic_sampling``, ``dynamic_rounds``: DAPO's
    filter and refill (module docstring). ``framing``: the chat framing of host episodes (None:
    the games' `ChatFraming` with the agent system prompt; the tool-use setting passes a
    `rollout.tool_chat.ToolChatFraming`). ``wave``: at most this many episodes are sampled at
    once (host and device rollouts each play their episodes in consecutive waves of ``wave``,
    wave ``w > 0`` sampling with its own derived seed; 0: all at once), what bounds the
    sampler's cache memory (``python -m spade_jax.plan --sample_batch``)."""
    if advantage not in advantages.MODES:
      raise ValueError(f"advantage={advantage!r}; expected one of {advantages.MODES}")
    if dynamic_rounds < 1:
      raise ValueError(f"dynamic_rounds must be >= 1, got {dynamic_rounds}")
    if wave < 0:
      raise ValueError(f"wave must be >= 0 (0: every episode at once), got {wave}")
    self.wave = wave
    self.advantage = advantage
    self.dynamic_sampling, self.dynamic_rounds = dynamic_sampling, dynamic_rounds
    self.engine, self.tok, self.rollout, self.pool = engine, tok, rollout, pool
    self.plays, self.hint_plays, self.device = plays, hint_plays, device
    self.framing = framing or ChatFraming.from_tokenizer(tok, system=prompts.AGENT_SYSTEM)
    self.games: list[GameEnv | None] = []
    self._instances: dict[int, list] = {}
    self.on_device: set[int] = set()
    self.device_refusals: dict[int, str] = {}
    self._seconds = {"host": 0.0, "device": 0.0}  # rollout wall time of the current play()

  def load(self, games: list[GameEnv | None]) -> None:
    """Replaces the pool: loads ``plays + hint_plays`` sandboxed instances per valid game."""
    for envs in self._instances.values():
      self.pool.close_envs([e for e in envs if not isinstance(e, EnvError)])
    self.games = list(games)
    self._instances, self.on_device, self.device_refusals = {}, set(), {}
    for g in games:
      if g is None:
        continue
      if self.device is not None and g.translated and g.program is not None:
        try:
          self.device.first_templates(g.program)  # validated and cached
          self.on_device.add(g.game)
          continue
        except (TemplateError, ProgramError) as e:
          self.device_refusals[g.game] = str(e)
      self._instances[g.game] = self.pool.make_envs(
        g.source, self.plays + self.hint_plays, class_name=g.class_name
      )

  def play(self, *, step: int, seed: int, with_hints: bool, params=None) -> PoolPlays:
    t0 = time.perf_counter()
    self._seconds = {"host": 0.0, "device": 0.0}
    G, P, H = len(self.games), self.plays, self.hint_plays if with_hints else 0
    episodes = []  # (game, play, hinted)
    for g, game in enumerate(self.games):
      if game is None:
        continue
      episodes += [(g, p, False) for p in range(P)] + [(g, h, True) for h in range(H)]
    seeds = [derive_seed(seed, step, g, p) for g, p, _ in episodes]
    returns_GP = np.zeros((G, P), np.float32)
    valid_GP = np.zeros((G, P), bool)
    crashed_GP = np.zeros((G, P), bool)
    turns_GP = np.zeros((G, P), np.int32)
    hint = (np.zeros((G, H), np.float32), np.zeros((G, H), bool), np.zeros((G, H), bool))
    agent_batch, transcripts, solved_hint, ds_metrics, tool_metrics = None, [], [], {}, {}
    if episodes:
      res = self._run(episodes, seeds, derive_seed(seed, step, 7), params)
      kept = []
      for i, (g, p, hinted) in enumerate(episodes):
        blame = res.crashed[i] and not res.collateral[i]
        ok = not res.crashed[i]
        if hinted:
          hint[0][g, p], hint[1][g, p], hint[2][g, p] = res.reward[i], ok, blame
          solved_hint.append(bool(res.solved[i]))
        else:
          returns_GP[g, p], valid_GP[g, p], crashed_GP[g, p] = res.reward[i], ok, blame
          turns_GP[g, p] = res.turns[i]
          if ok:
            kept.append(i)
        transcripts.append(
          {
            "game": g,
            "play": p,
            "hinted": hinted,
            "seed": seeds[i],
            "reward": float(res.reward[i]),
            "error": res.errors[i],
            "messages": res.transcripts[i],
          }
        )
      if not isinstance(self.framing, ChatFraming):  # the tool-use setting's framing
        tool_metrics = _tool_metrics(res, episodes)
      adv_GP, keep_GP = advantages.group_advantages(
        returns_GP, valid_GP, crashed_GP, mode=self.advantage
      )
      groups = _groups(res, episodes, kept, np.asarray(adv_GP), np.asarray(keep_GP), 0)
      if self.dynamic_sampling:
        informative_G = np.asarray(advantages.informative_groups(returns_GP, keep_GP))
        groups, ds_metrics = self._refill(groups, informative_G, step, seed, params)
      rows = [row for group in groups.values() for row in group]
      if rows:
        agent_batch = trajectories.from_sequences(
          [r["tokens"] for r in rows],
          [r["mask"] for r in rows],
          [r["logprobs"] for r in rows],
          role=trajectories.ROLE_AGENT,
          rewards=[r["reward"] for r in rows],
          advantages=[r["advantage"] for r in rows],
          group_id=[r["group"] for r in rows],
          turns=[r["turns"] for r in rows],
        )
    crashed_G = crashed_GP.any(1) | hint[2].any(1)
    n_valid = max(int(valid_GP.sum()), 1)
    metrics = {
      "agent/solve_rate": float((returns_GP >= 1.0)[valid_GP].sum() / n_valid),
      "agent/return_mean": float(returns_GP[valid_GP].sum() / n_valid),
      "agent/turns_mean": float(turns_GP[valid_GP].sum() / n_valid),
      "agent/crash_rate": float(crashed_GP.sum() / max(len(episodes), 1)),
      "agent/episodes": float(valid_GP.sum()),
      "agent/device_episodes": float(sum(g in self.on_device for g, _, _ in episodes)),
      "agent/host_episodes": float(sum(g not in self.on_device for g, _, _ in episodes)),
      "agent/device_share": float(
        sum(g in self.on_device for g, _, _ in episodes) / max(len(episodes), 1)
      ),
      "agent/device_refused_games": float(len(self.device_refusals)),
      "perf/rollout_s": time.perf_counter() - t0,
      "perf/rollout_host_s": self._seconds["host"],
      "perf/rollout_device_s": self._seconds["device"],
    }
    if with_hints:
      metrics["agent/solve_rate_hint"] = float(np.mean(solved_hint)) if solved_hint else 0.0
    metrics.update(ds_metrics)
    metrics.update(tool_metrics)
    return PoolPlays(
      returns_GP,
      valid_GP,
      crashed_GP,
      turns_GP,
      hint[0] if with_hints else None,
      hint[1] if with_hints else None,
      hint[2] if with_hints else None,
      crashed_G,
      agent_batch,
      metrics,
      transcripts,
    )

  def _refill(self, groups: dict, informative_G, step: int, seed: int, params) -> tuple:
    """DAPO dynamic sampling: keeps the informative groups of the first round, then plays
    further rounds of the whole pool (fresh seeds, no hints) until there is one informative
    group per valid game or ``dynamic_rounds`` rounds are played; the batch takes the first
    such groups (round by round, game by game). Group ids are ``round * G + game``."""
    G, P = len(self.games), self.plays
    valid = [g for g, game in enumerate(self.games) if game is not None]
    target = len(valid)
    chosen = [group for g, group in groups.items() if informative_G[g]]
    dropped = int(sum(not informative_G[g] for g in valid))
    rounds = 1
    while len(chosen) < target and rounds < self.dynamic_rounds:
      episodes = [(g, p, False) for g in valid for p in range(P)]
      seeds = [derive_seed(seed, step, g, p, rounds) for g, p, _ in episodes]
      res = self._run(episodes, seeds, derive_seed(seed, step, 7, rounds), params)
      returns_GP = np.zeros((G, P), np.float32)
      valid_GP = np.zeros((G, P), bool)
      crashed_GP = np.zeros((G, P), bool)
      for i, (g, p, _) in enumerate(episodes):
        returns_GP[g, p], valid_GP[g, p] = res.reward[i], not res.crashed[i]
        crashed_GP[g, p] = res.crashed[i] and not res.collateral[i]
      adv_GP, keep_GP = advantages.group_advantages(
        returns_GP, valid_GP, crashed_GP, mode=self.advantage
      )
      kept = [i for i in range(len(episodes)) if not res.crashed[i]]
      more = _groups(res, episodes, kept, np.asarray(adv_GP), np.asarray(keep_GP), rounds * G)
      new_G = np.asarray(advantages.informative_groups(returns_GP, keep_GP))
      chosen += [group for g, group in more.items() if new_G[g]]
      dropped += int(sum(not new_G[g] for g in valid))
      rounds += 1
    chosen = chosen[:target]
    metrics = {
      "agent/dynamic_rounds": float(rounds),
      "agent/dynamic_dropped_groups": float(dropped),
      "agent/dynamic_groups": float(len(chosen)),
    }
    return {k: group for k, group in enumerate(chosen)}, metrics

  def _run(self, episodes, seeds, sample_seed: int, params) -> host_rollout.EpisodeResult:
    """Plays ``episodes`` ``(game, play, hinted)``: on device where the game's program is
    loaded there, on the host otherwise, each in waves of at most ``self.wave``; one result in
    episode order."""
    parts = []
    host = [i for i, (g, _, _) in enumerate(episodes) if g not in self.on_device]
    dev = [i for i, (g, _, _) in enumerate(episodes) if g in self.on_device]
    size = self.wave or max(len(host), len(dev), 1)
    for idx, play in ((host, self._run_host), (dev, self._run_device)):
      for w, at in enumerate(range(0, len(idx), size)):
        wave_seed = sample_seed if w == 0 else derive_seed(sample_seed, w)
        parts.append(play(episodes, idx[at : at + size], seeds, wave_seed, params))
    return _merge(len(episodes), parts)

  def _run_host(self, episodes, host, seeds, sample_seed: int, params) -> tuple:
    """``(host, result)``: episodes ``host`` played by the host rollout."""
    P = self.plays
    instances = [
      self._instances[g][p + (P if hinted else 0)] for g, p, hinted in (episodes[i] for i in host)
    ]
    hints = [self.games[episodes[i][0]].hint if episodes[i][2] else None for i in host]

    def first_message(k, obs):
      return prompts.attach_hint(obs, hints[k]) if hints[k] else obs

    t = time.perf_counter()
    res = host_rollout.play(
      self.engine,
      self.tok,
      self.framing,
      _InstanceBatch(self.pool, instances),
      [seeds[i] for i in host],
      first_message,
      self.rollout,
      seed=sample_seed,
      params=params,
    )
    self._seconds["host"] += time.perf_counter() - t
    return host, res

  def _run_device(self, episodes, dev, seeds, sample_seed: int, params) -> tuple:
    """``(dev, result)``: episodes ``dev`` played by the on-device rollout."""
    t = time.perf_counter()
    out = self.device(
      [self.games[episodes[i][0]].program for i in dev],
      [seeds[i] for i in dev],
      [episodes[i][2] for i in dev],
      seed=sample_seed,
      params=params,
    )
    res = out.episodes(self.tok, self.framing)
    self._seconds["device"] += time.perf_counter() - t
    return dev, res


def _tool_metrics(res: host_rollout.EpisodeResult, episodes) -> dict:
  """Tool-use counters of the valid episodes: calls per episode, failed calls per call, turns
  with neither a call nor an answer per turn, and success with and without the hint."""
  ok = ~np.asarray(res.crashed)
  calls, errors, fmt = (
    np.asarray(getattr(res, k), np.float64) for k in ("tool_calls", "tool_errors", "format_errors")
  )
  hinted = np.asarray([h for _, _, h in episodes], bool)
  solved = np.asarray(res.solved, bool)
  out = {
    "tool/calls_per_episode": float(calls[ok].mean()) if ok.any() else 0.0,
    "tool/tool_error_rate": float(errors[ok].sum() / max(calls[ok].sum(), 1.0)),
    "tool/format_error_rate": float(fmt[ok].sum() / max(np.asarray(res.turns)[ok].sum(), 1)),
    "tool/success": float(solved[ok & ~hinted].mean()) if (ok & ~hinted).any() else 0.0,
  }
  if (ok & hinted).any():
    out["tool/success_hint"] = float(solved[ok & hinted].mean())
  return out


def _groups(res, episodes, kept, adv_GP, keep_GP, group_offset: int) -> dict[int, list[dict]]:
  """The agent-batch rows of kept unhinted episodes, by game (episode order within a game)."""
  out: dict[int, list[dict]] = {}
  for i in kept:
    g, p, hinted = episodes[i]
    if hinted or not keep_GP[g, p]:
      continue
    out.setdefault(g, []).append(
      {
        "tokens": res.tokens[i],
        "mask": res.loss_mask[i],
        "logprobs": res.logprobs[i],
        "reward": res.reward[i],
        "advantage": adv_GP[g, p],
        "group": group_offset + g,
        "turns": res.turns[i],
      }
    )
  return out


def _merge(n: int, parts) -> host_rollout.EpisodeResult:
  """One `EpisodeResult` of ``n`` episodes from ``(indices, result)`` parts."""
  fields = {}
  for f in dataclasses.fields(host_rollout.EpisodeResult):
    first = getattr(parts[0][1], f.name)
    fields[f.name] = (
      [None] * n if isinstance(first, list) else np.zeros((n,), np.asarray(first).dtype)
    )
    for idx, res in parts:
      values = getattr(res, f.name)
      for k, i in enumerate(idx):
        fields[f.name][i] = values[k]
  return host_rollout.EpisodeResult(**fields)


class _InstanceBatch(host_rollout.SandboxEnvBatch):
  """Episodes addressed by index over a list that may hold load errors (reported per call)."""

  def _local(self, idx, args, call):
    out = [None] * len(idx)
    live = [k for k, i in enumerate(idx) if not isinstance(self.envs[i], EnvError)]
    for k, i in enumerate(idx):
      if isinstance(self.envs[i], EnvError):
        out[k] = self.envs[i]
    if live:
      results = call([self.envs[idx[k]] for k in live], [args[k] for k in live])
      for k, r in zip(live, results):
        out[k] = r
    return out
