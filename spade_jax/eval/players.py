"""Who plays an evaluation episode: the model (`ModelPlayer`) or a script (`ScriptedPlayer`).

Both take a suite and a list of ``(prompt, sample)`` items and return one `Episode` per item,
in order, with the whole transcript and the score (`eval.suite.score_of`). The model plays
through the training rollout (`rollout.host.play`: the sharded engine, the chat or tool
framing, one KV cache per episode, batched); a script is a `Policy` per episode (the suite's
ground-truth oracle, or `suite.empty_policy`), stepped in-process with the same transcript
messages the model would have seen. An environment that raises ends its episode with score 0
and the error recorded (for a benchmark environment that is a harness bug, so it is counted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from spade_jax.eval.suite import Policy, Prompt, Sampling, Suite, score_of
from spade_jax.rollout import host as host_rollout
from spade_jax.rollout.chat import ChatFraming
from spade_jax.rollout.tool_chat import ToolChatFraming, feedback_messages

Item = tuple[Prompt, int]  # a prompt and its sample index


@dataclasses.dataclass
class Episode:
  prompt_id: str
  category: str
  sample: int
  score: float
  turns: int
  terminated: bool
  truncated: bool
  transcript: list[dict[str, str]]
  detail: Any = None  # the grader's verdict: the final step info's "eval" entry
  error: str | None = None  # the environment raised (the episode scores 0)

  def record(self) -> dict:
    return dataclasses.asdict(self)


class _Recording:
  """An environment that remembers its last step info (the grader's verdict lives there)."""

  def __init__(self, env):
    self.env = env
    self.last_info: dict = {}
    self._first = None  # a reset taken ahead (to size the cache), handed out once

  def reset(self, seed=None):
    if self._first is not None and self._first[0] == seed:
      out, self._first = self._first[1], None
    else:
      out = self.env.reset(seed=seed)
    self.last_info = out[1] if isinstance(out, tuple) and len(out) > 1 else {}
    return out

  def reset_ahead(self, seed):
    self._first = (seed, self.env.reset(seed=seed))
    return self._first[1]

  def step(self, action):
    out = self.env.step(action)
    self.last_info = out[4] if isinstance(out, tuple) and len(out) > 4 else {}
    return out


def _detail(info) -> Any:
  return info.get("eval") if isinstance(info, dict) else None


def _feedback(framing: str, obs: str, info: dict) -> list[dict[str, str]]:
  if framing == "tool":
    return feedback_messages(obs, info)
  return [{"role": "user", "content": str(obs)}]


class ScriptedPlayer:
  """Plays each episode with ``policy_for(prompt)`` (a fresh `Policy` per episode)."""

  def __init__(self, policy_for: Callable[[Prompt], Policy | None]):
    self.policy_for = policy_for

  def play(self, suite: Suite, items: Sequence[Item]) -> list[Episode]:
    return [self._one(suite, p, s) for p, s in items]

  def _one(self, suite: Suite, prompt: Prompt, sample: int) -> Episode:
    policy = self.policy_for(prompt)
    if policy is None:
      raise ValueError(f"suite {suite.name} has no scripted policy for {prompt.id}")
    env = suite.make_env(prompt)
    transcript: list[dict[str, str]] = []
    turns, reward, term, trunc, info = 0, 0.0, False, False, {}
    try:
      obs, info = env.reset(seed=prompt.seed)
      transcript.append({"role": "user", "content": suite.first_message(prompt, obs)})
      while not (term or trunc) and turns < suite.max_turns:
        action = policy(obs, info)
        transcript.append({"role": "assistant", "content": action})
        turns += 1
        obs, reward, term, trunc, info = env.step(action)
        if not (term or trunc) and turns < suite.max_turns:  # as host.play: no unanswered turn
          transcript.extend(_feedback(suite.framing, obs, info))
    except Exception as e:  # a benchmark env raising is a harness bug: recorded, scored 0
      return Episode(
        prompt.id,
        prompt.category,
        sample,
        0.0,
        turns,
        False,
        False,
        transcript,
        error=f"{type(e).__name__}: {e}",
      )
    return Episode(
      prompt.id,
      prompt.category,
      sample,
      score_of(reward, term),
      turns,
      bool(term),
      bool(trunc) or not term,
      transcript,
      _detail(info),
    )


class ModelPlayer:
  """Plays episodes with the policy model through `rollout.host.play`, ``batch`` at a time.

  ``params_fn()`` gives the parameters to sample with (None: the engine's own); ``sampling``
  overrides every suite's default; ``max_context`` caps the KV cache per episode,
  ``max_new_tokens`` / ``max_turns`` cap a suite's own (smoke runs)."""

  def __init__(
    self,
    engine,
    tok,
    *,
    max_context: int,
    params_fn: Callable[[], Any] = lambda: None,
    sampling: Sampling | None = None,
    batch: int = 64,
    seed: int = 0,
    max_new_tokens: int | None = None,
    max_turns: int | None = None,
  ):
    self.engine, self.tok = engine, tok
    self.max_context, self.params_fn = max_context, params_fn
    self.sampling, self.batch, self.seed = sampling, batch, seed
    self.max_new_tokens, self.max_turns = max_new_tokens, max_turns
    self._framings: dict = {}

  def framing(self, suite: Suite):
    key = (suite.framing, suite.system)
    if key not in self._framings:
      cls = ToolChatFraming if suite.framing == "tool" else ChatFraming
      self._framings[key] = cls.from_tokenizer(self.tok, system=suite.system)
    return self._framings[key]

  def rollout_config(self, suite: Suite) -> host_rollout.RolloutConfig:
    s = self.sampling or suite.sampling
    new = min(self.max_new_tokens or suite.max_new_tokens, suite.max_new_tokens)
    return host_rollout.RolloutConfig(
      max_turns=min(self.max_turns or suite.max_turns, suite.max_turns),
      max_new_tokens=min(new, self.max_context - 1),
      max_context=self.max_context,
      temperature=s.temperature,
      top_p=s.top_p,
      top_k=s.top_k,
      greedy=s.greedy,
    )

  def play(self, suite: Suite, items: Sequence[Item]) -> list[Episode]:
    out: list[Episode] = []
    for lo in range(0, len(items), self.batch):
      out += self._chunk(suite, list(items[lo : lo + self.batch]), lo)
    return out

  def _chunk(self, suite: Suite, items: list[Item], offset: int) -> list[Episode]:
    envs = [_Recording(suite.make_env(p)) for p, _ in items]
    cfg = self.rollout_config(suite)
    lengths = self._prompt_lengths(suite, items, envs)
    out: list[Episode | None] = [None] * len(items)
    play = []
    for i, n in enumerate(lengths):
      if n is not None and n + 1 >= cfg.max_context:  # the first prompt alone fills the cache
        p, s = items[i]
        why = f"prompt too long: {n} tokens for a cache of {cfg.max_context} (raise max_context)"
        out[i] = Episode(p.id, p.category, s, 0.0, 0, False, True, [], error=why)
      else:
        play.append(i)
    if suite.max_turns == 1 and play:  # one turn: the longest prompt + one answer suffice
      longest = max(lengths[i] or 1 for i in play)
      cache = min(cfg.max_context, self.engine.bucket(longest + cfg.max_new_tokens + 1))
      cfg = dataclasses.replace(cfg, max_context=cache)
    if play:
      sub = [items[i] for i in play]
      res = host_rollout.play(
        self.engine,
        self.tok,
        self.framing(suite),
        host_rollout.LocalEnvBatch([envs[i] for i in play]),
        [p.seed for p, _ in sub],
        lambda j, obs: suite.first_message(sub[j][0], obs),
        cfg,
        seed=self.seed + 7919 * offset + sum(s for _, s in items),
        params=self.params_fn(),
      )
      for j, i in enumerate(play):
        p, s = items[i]
        term = bool(res.terminated[j])
        out[i] = Episode(
          p.id,
          p.category,
          s,
          score_of(float(res.reward[j]), term),
          int(res.turns[j]),
          term,
          not term,
          res.transcripts[j],
          _detail(envs[i].last_info) if term else None,
          res.errors[j],
        )
    return out

  def _prompt_lengths(self, suite: Suite, items: list[Item], envs) -> list[int | None]:
    """Tokens of each episode's first prompt (None: its reset failed; host.play reports it)."""
    framing, out = self.framing(suite), []
    for (p, _), env in zip(items, envs):
      try:
        obs, info = env.reset_ahead(p.seed)
      except Exception:
        out.append(None)
        continue
      out.append(len(framing.open(self.tok, suite.first_message(p, obs), info)))
    return out
