"""Host-loop multi-turn rollout: the engine decodes on device, environments step on the host.

This is the path for environments that cannot be translated to an ``EnvProgram`` (sandboxed
Python) and the reference the on-device rollout is tested against. One engine state holds every
episode; each round decodes until all sequences ended their turn, steps the environments with
the decoded turn text, and feeds the framed feedback back through the KV cache (no re-prefill).
The output is the same ``Trajectories`` layout as the on-device path.

Episode reward (SPADE_METHOD.md): the terminal step reward clamped to [-1, 1] if the episode
terminated, else 0. An environment error ends its episode with ``crashed`` set (the caller
drops it from the agent batch and blames the designer, or not, as it decides).

The framing decides what the model sees (`Framing`): games use `rollout.chat.ChatFraming`
(feedback = the observation as a user message; ``info`` ignored), tool-use environments
`rollout.tool_chat.ToolChatFraming` (first prompt with the reset info's ``tools``, feedback =
the step info's ``tool_results`` as ``tool`` messages plus a revealed ``user_message``). Per
episode, the step infos' ``tool_calls``, ``tool_errors`` and ``format_error`` are summed into
the result's counters (zeros for games, whose infos carry none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import numpy as np

from spade_jax import multihost, trajectories
from spade_jax.engine.generate import Engine, SamplingParams
from spade_jax.tokenizer import Tokenizer


class EnvBatch(Protocol):
  """A batch of environment instances addressed by index; errors come back as exceptions."""

  def reset(self, idx: Sequence[int], seeds: Sequence[int]) -> list[Any]: ...

  def step(self, idx: Sequence[int], actions: Sequence[str]) -> list[Any]: ...


class Framing(Protocol):
  """Token-level chat framing of an episode (`rollout.chat.ChatFraming`,
  `rollout.tool_chat.ToolChatFraming`)."""

  turn_end: int

  def open(self, tok: Tokenizer, content: str, info: dict | None = None) -> list[int]: ...

  def turn(
    self, tok: Tokenizer, obs: str, info: dict | None = None, *, ended_with_turn_end: bool = True
  ) -> tuple[list[int], list[dict[str, str]]]: ...


class LocalEnvBatch:
  """Trusted in-process environments (library twins, tests). Never use for designer code."""

  def __init__(self, envs: Sequence[Any]):
    self.envs = list(envs)

  def _call(self, fn: Callable[[], Any]) -> Any:
    try:
      return fn()
    except Exception as e:  # an env error ends that episode only
      return e

  def reset(self, idx, seeds):
    return [self._call(lambda i=i, s=s: self.envs[i].reset(seed=s)) for i, s in zip(idx, seeds)]

  def step(self, idx, actions):
    return [self._call(lambda i=i, a=a: self.envs[i].step(a)) for i, a in zip(idx, actions)]


class SandboxEnvBatch:
  """Environments living in sandbox workers (``SandboxPool.make_envs``), stepped in parallel.

  In a multi-process run environment ``i`` is stepped by the process that `multihost.owns` it
  (always the same one, so its state lives there) and the results are gathered to every
  process; each process holds instances of every environment, but steps only its share."""

  def __init__(self, pool, envs: Sequence[Any]):
    self.pool, self.envs = pool, list(envs)

  def reset(self, idx, seeds):
    return self._shared(idx, [int(s) for s in seeds], self.pool.reset_many)

  def step(self, idx, actions):
    return self._shared(idx, list(actions), self.pool.step_many)

  def _shared(self, idx, args, call) -> list:
    mine = [k for k, i in enumerate(idx) if multihost.owns(i)]
    local = self._local([idx[k] for k in mine], [args[k] for k in mine], call) if mine else []
    if jax.process_count() == 1:
      return list(local)
    merged: dict[int, Any] = {}
    for part in multihost.allgather_objects(dict(zip(mine, local))):
      merged.update(part)
    return [merged[k] for k in range(len(idx))]

  def _local(self, idx, args, call) -> list:
    """``call`` (the pool's reset_many / step_many) on this process's environments ``idx``."""
    return call([self.envs[i] for i in idx], args)


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  max_turns: int = 10  # hard cap on assistant turns (the env's own max_turns applies first)
  max_new_tokens: int = 256  # sampled tokens per assistant turn
  max_context: int = 4096  # cache slots for the whole episode (prompt + all turns)
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  greedy: bool = False


@dataclasses.dataclass
class EpisodeResult:
  tokens: list[list[int]]  # prompt + every turn, per episode
  loss_mask: list[list[int]]
  logprobs: list[list[float]]
  reward: np.ndarray  # [N] terminal reward if terminated else 0
  turns: np.ndarray  # [N] assistant turns taken
  terminated: np.ndarray  # [N] bool
  truncated: np.ndarray  # [N] bool (env truncation, turn cap or context exhausted)
  crashed: np.ndarray  # [N] bool (an environment call failed)
  collateral: np.ndarray  # [N] bool: the failure was another env's fault (shared worker died)
  errors: list[str | None]
  transcripts: list[list[dict[str, str]]]  # role/content messages (decoded)
  # per-episode sums over the step infos (None: zeros, e.g. for games)
  tool_calls: np.ndarray | None = None  # [N] int32 tool calls run
  tool_errors: np.ndarray | None = None  # [N] int32 calls that failed
  format_errors: np.ndarray | None = None  # [N] int32 turns with neither a call nor an answer

  def __post_init__(self):
    for name in ("tool_calls", "tool_errors", "format_errors"):
      if getattr(self, name) is None:
        setattr(self, name, np.zeros(len(self.tokens), np.int32))

  @property
  def solved(self) -> np.ndarray:
    return self.terminated & (self.reward >= 1.0)

  def to_trajectories(self, *, group_id, advantages=0.0, seq_len: int | None = None):
    return trajectories.from_sequences(
      self.tokens,
      self.loss_mask,
      self.logprobs,
      role=trajectories.ROLE_AGENT,
      rewards=self.reward,
      advantages=advantages,
      group_id=group_id,
      turns=self.turns,
      seq_len=seq_len,
    )


def play(
  engine: Engine,
  tok: Tokenizer,
  framing: Framing,
  envs: EnvBatch,
  seeds: Sequence[int],
  first_message: Callable[[int, str], str],
  cfg: RolloutConfig,
  *,
  seed: int = 0,
  params=None,
) -> EpisodeResult:
  """Plays one episode per seed (episode ``i`` on environment ``i`` of ``envs``).

  ``first_message(i, observation)`` builds episode ``i``'s first user message (instruction
  preamble, observation, optional hint); the framing frames it with the reset info (a tool
  episode's tools) and each step's feedback from its observation and info.
  """
  n = len(seeds)
  idx = list(range(n))
  crashed = np.zeros(n, bool)
  collateral = np.zeros(n, bool)
  errors: list[str | None] = [None] * n
  transcripts: list[list[dict[str, str]]] = [[] for _ in range(n)]
  counters = {k: np.zeros(n, np.int32) for k in ("tool_calls", "tool_errors", "format_errors")}
  first = envs.reset(idx, seeds)
  prompts = []
  for i, res in enumerate(first):
    if isinstance(res, Exception):
      crashed[i], errors[i] = True, f"reset: {type(res).__name__}: {res}"
      collateral[i] = bool(getattr(res, "collateral", False))
      obs, info = "", {}
    else:
      obs, info = res[0], _info(res, 1)
    content = first_message(i, obs)
    transcripts[i].append({"role": "user", "content": content})
    prompts.append(framing.open(tok, content, info))
  state = engine.init(
    prompts,
    max_new_tokens=cfg.max_new_tokens,
    cache_size=cfg.max_context,
    stop_token_ids=list(tok.eos_ids),
    seed=seed,
    params=params,
  )
  sampling = SamplingParams.make(
    n, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, greedy=cfg.greedy
  )
  if crashed.any():
    state = engine.finish(state, np.flatnonzero(crashed).tolist())
  reward = np.zeros(n, np.float32)
  turns = np.zeros(n, np.int32)
  terminated = np.zeros(n, bool)
  truncated = np.zeros(n, bool)
  seen = [0] * n  # post-prompt tokens already consumed per episode
  live = [i for i in idx if not crashed[i]]
  while live:
    state = engine.run(state, sampling, params=params)
    out = engine.outputs(state)
    acting, actions, ended = [], [], []
    for i in live:
      turn_tokens = out.tokens[i][seen[i] :]
      seen[i] = len(out.tokens[i])
      turns[i] += 1
      ended_with_stop = bool(turn_tokens) and turn_tokens[-1] in tok.eos_ids
      text = tok.decode(turn_tokens[:-1] if ended_with_stop else turn_tokens)
      transcripts[i].append({"role": "assistant", "content": text})
      if out.stop_reason[i] in ("cache_full", "finished"):
        truncated[i] = True
        continue
      acting.append(i)
      actions.append(text)
      ended.append(ended_with_stop)
    results = envs.step(acting, actions) if acting else []
    feed_ids, feed_tokens, finish = [], [], [i for i in live if truncated[i]]
    for i, res, stop in zip(acting, results, ended):
      if isinstance(res, Exception):
        crashed[i], errors[i] = True, f"step: {type(res).__name__}: {res}"
        collateral[i] = bool(getattr(res, "collateral", False))
        finish.append(i)
        continue
      obs, r, term, trunc = res[0], float(res[1]), bool(res[2]), bool(res[3])
      info = _info(res, 4)
      counters["tool_calls"][i] += _count(info.get("tool_calls"))
      counters["tool_errors"][i] += _count(info.get("tool_errors"))
      counters["format_errors"][i] += int(info.get("format_error") is True)
      if term:
        terminated[i], reward[i] = True, np.clip(r, -1.0, 1.0)
      elif trunc or turns[i] >= cfg.max_turns:
        truncated[i] = True
      if terminated[i] or truncated[i]:
        finish.append(i)
        continue
      fb, messages = framing.turn(tok, obs, info, ended_with_turn_end=stop)
      transcripts[i].extend(messages)
      if state.cache.index + len(fb) + 1 >= state.cache_size:  # no room for another turn
        truncated[i] = True
        finish.append(i)
        continue
      feed_ids.append(i)
      feed_tokens.append(fb)
      seen[i] += len(fb)  # the forced feedback is not part of the next assistant turn
    if finish:
      state = engine.finish(state, finish)
    if feed_ids:
      state = engine.feed(state, feed_ids, feed_tokens)
    live = feed_ids
  out = engine.outputs(state)
  tokens, mask, logprobs = [], [], []
  for i in range(n):
    tokens.append(list(prompts[i]) + out.tokens[i])
    mask.append([0] * len(prompts[i]) + out.loss_mask[i])
    logprobs.append([0.0] * len(prompts[i]) + out.logprobs[i])
  return EpisodeResult(
    tokens,
    mask,
    logprobs,
    reward,
    turns,
    terminated,
    truncated,
    crashed,
    collateral,
    errors,
    transcripts,
    **counters,
  )


def _info(res, at: int) -> dict:
  """The info dict at position ``at`` of a reset/step result ({} when absent or malformed)."""
  info = res[at] if isinstance(res, tuple | list) and len(res) > at else None
  return info if isinstance(info, dict) else {}


def _count(value) -> int:
  """A step info's counter (an environment's info is untrusted: anything else counts 0)."""
  ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 2**20
  return int(value) if ok else 0
