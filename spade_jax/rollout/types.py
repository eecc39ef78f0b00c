"""The data types around the on-device rollout: its static spec, first-message templates,
output (with host conversions) and the scripted test policy.

* `RolloutSpec`: static sizes and chat framing (a jit static argument of `device.rollout`).
* `FirstTemplates` / `first_templates`: a program's first user message, ``preamble + obs``
  and ``preamble + obs + "\\n\\nHINT: " + hint``, compiled on the host into two larger
  templates (``text.compile_template`` over the observation and hint items), which verifies
  them against ``tokenizer.encode`` of the whole string: the separator and the text merges at
  the boundaries tokenise exactly as the host path's ``encode(content)``. A program whose hint
  template is empty gets no ``HINT:`` line (``prompts.attach_hint`` is skipped for an empty
  hint).
* `RolloutOutput`: every episode's conversation left-aligned (prompt, then each assistant turn
  and feedback, in order), loss mask (1 on sampled assistant tokens only), rollout log-probs,
  and per-episode reward (terminal reward if terminated, else 0), turns, flags and the reason
  the episode ended. `to_trajectories` gives the update's `Trajectories`; `episodes` gives the
  host loop's `EpisodeResult` (with decoded transcripts), so callers treat both paths alike.
* `ScriptedPolicy`: a logits processor that makes the policy write given answers: per turn a
  token script then the end-of-turn token, or nothing (the model samples freely). The
  on-device rollout initialises it from per-episode scripts or from each program's own solution
  (the "oracle"); the host `Engine` takes the scripts as static data (``scripts=``), so both
  paths can be driven by the same script.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from spade_jax import multihost, trajectories
from spade_jax.engine.decode import DecodeState
from spade_jax.envs.ir import text
from spade_jax.envs.ir.interpreter import EnvState, fault_names
from spade_jax.envs.ir.program import DEFAULT_CONFIG, TPL_HINT, EnvProgram, ProgramConfig
from spade_jax.rollout.host import EpisodeResult

# Why an episode ended (``end_reason_B``).
RUNNING, TERMINATED, ENV_TRUNCATED, TURN_CAP, CONTEXT, FAULT = range(6)
END_REASONS = ("running", "terminated", "env_truncated", "turn_cap", "context", "fault")
HINT_SEPARATOR = "\n\nHINT: "


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
  """Static sizes and framing of a rollout (hashable: a static argument of `rollout`)."""

  program_cfg: ProgramConfig
  max_context: int  # cache slots S for a whole episode, prompt included
  prompt_len: int  # slots P of the (left-padded) first prompt
  first_prefix: tuple[int, ...]
  first_suffix: tuple[int, ...]
  turn_prefix: tuple[int, ...]
  turn_suffix: tuple[int, ...]
  turn_end: int
  stop_ids: tuple[int, ...]
  first_extra: int  # literal tokens a first message may add to obs + hint (preamble, separator)
  preamble: str = ""
  script_turns: int = 0  # >0: a `ScriptedPolicy` with this many scripted turns is active
  script_width: int = 64  # tokens per scripted answer
  feed_chunk: int = 0  # >0: consume queued feedback in chunks of this many tokens
  cache_dtype: str = "float32"

  @classmethod
  def make(
    cls,
    tok,
    framing,
    *,
    max_context: int,
    program_cfg: ProgramConfig = DEFAULT_CONFIG,
    prompt_len: int = 256,
    preamble: str = "",
    script_turns: int = 0,
    script_width: int = 64,
    feed_chunk: int = 0,
    cache_dtype="float32",
  ) -> RolloutSpec:
    extra = len(tok.encode(preamble)) + len(tok.encode(HINT_SEPARATOR)) + 8
    spec = cls(
      program_cfg=program_cfg,
      max_context=int(max_context),
      prompt_len=int(prompt_len),
      first_prefix=tuple(int(t) for t in framing.first_prefix),
      first_suffix=tuple(int(t) for t in framing.first_suffix),
      turn_prefix=tuple(int(t) for t in framing.turn_prefix),
      turn_suffix=tuple(int(t) for t in framing.turn_suffix),
      turn_end=int(framing.turn_end),
      stop_ids=tuple(int(t) for t in tok.eos_ids),
      first_extra=extra,
      preamble=preamble,
      script_turns=int(script_turns),
      script_width=int(script_width),
      feed_chunk=int(feed_chunk),
      cache_dtype=jnp.dtype(cache_dtype).name,
    )
    spec.check()
    return spec

  def check(self) -> None:
    if self.content_len < 16:
      raise ValueError(f"prompt_len {self.prompt_len} leaves no room for the first message")
    if self.prompt_len > 512 and self.prompt_len % 512:
      raise ValueError("prompt_len above 512 must be a multiple of 512 (prefill chunks)")
    if self.max_context <= self.prompt_len:
      raise ValueError(f"max_context {self.max_context} must exceed prompt_len {self.prompt_len}")
    if self.script_turns < 0 or self.script_width < 1 or self.feed_chunk < 0:
      raise ValueError("script_turns and feed_chunk must be >= 0, script_width >= 1")
    if self.feed_chunk and self.prompt_len % self.feed_chunk:
      raise ValueError(f"prompt_len {self.prompt_len} must be a multiple of feed_chunk")

  @property
  def content_len(self) -> int:
    """Tokens available to the first user message inside the prompt slots."""
    return self.prompt_len - len(self.first_prefix) - len(self.first_suffix)

  @property
  def first_cfg(self) -> ProgramConfig:
    """Template sizes of the first-message templates (observation + hint + extras)."""
    c = self.program_cfg
    return dataclasses.replace(
      c,
      tpl_tokens=2 * c.tpl_tokens + self.first_extra,
      tpl_slots=2 * c.tpl_slots,
      obs_len=self.content_len,
    )

  @property
  def feed_len(self) -> int:
    """Forced tokens of one feedback turn at most (end-of-turn + framing + observation)."""
    return 1 + len(self.turn_prefix) + self.program_cfg.obs_len + len(self.turn_suffix)

  @property
  def processor(self) -> ScriptedPolicy | None:
    if not self.script_turns:
      return None
    return ScriptedPolicy(self.turn_end, self.script_turns, self.script_width)


@struct.dataclass
class FirstTemplates:
  """One program's first user message for each observation template ``j`` without (index
  ``j``) and with (``n_obs + j``) the hint, in the layout `text.render` reads (sizes
  `RolloutSpec.first_cfg`; ``n_obs`` of the program's config)."""

  tpl_ids: jnp.ndarray  # [2 * n_obs, tpl_tokens]
  tpl_len: jnp.ndarray  # [2 * n_obs]
  tpl_slots: jnp.ndarray  # [2 * n_obs, tpl_slots, 6]
  tpl_tail: jnp.ndarray  # [2 * n_obs, tpl_slots, 2, tail_len]
  tpl_tail_len: jnp.ndarray  # [2 * n_obs, tpl_slots, 2]
  digit_ids: jnp.ndarray  # [10]
  sep_ids: jnp.ndarray  # [2, tail_len]
  sep_len: jnp.ndarray  # [2]


def first_templates(program: EnvProgram, tok, spec: RolloutSpec) -> FirstTemplates:
  """Compiles (and verifies against ``tok.encode``) ``preamble + obs`` and ``preamble + obs +
  HINT_SEPARATOR + hint``. Raises ``text.TemplateError`` if they do not fit or tokenise."""
  cfg = spec.first_cfg
  consts = {k: np.asarray(getattr(program, k)) for k in ("digit_ids", "sep_ids", "sep_len")}
  hint = text.template_items(program, TPL_HINT, tok)
  head = [("text", spec.preamble)] if spec.preamble else []
  n_obs = spec.program_cfg.n_obs
  plain = [
    head + text.template_items(program, spec.program_cfg.obs_template(j), tok) for j in range(n_obs)
  ]
  hinted = [p + [("text", HINT_SEPARATOR)] + hint if hint else p for p in plain]
  tpls = [text.compile_template(items, tok, cfg, consts) for items in plain + hinted]
  stack = lambda k: np.stack([np.asarray(t[k], np.int32) for t in tpls])
  return FirstTemplates(
    tpl_ids=stack("ids"),
    tpl_len=stack("len"),
    tpl_slots=stack("slots"),
    tpl_tail=stack("tail"),
    tpl_tail_len=stack("tail_len"),
    **{k: v.astype(np.int32) for k, v in consts.items()},
  )


@struct.dataclass
class RolloutOutput:
  """One rollout batch (leading axis B; T = cache slots, conversations right-padded with 0)."""

  tokens_BT: jax.Array  # int32 prompt + turns, left-aligned
  loss_mask_BT: jax.Array  # bool: sampled (assistant) tokens
  logprobs_BT: jax.Array  # float32 sampler log-prob of sampled tokens, 0 elsewhere
  length_B: jax.Array  # int32 conversation length
  prompt_len_B: jax.Array  # int32 first prompt length
  reward_B: jax.Array  # float32 terminal reward if terminated else 0
  turns_B: jax.Array  # int32 assistant turns taken
  terminated_B: jax.Array  # bool
  truncated_B: jax.Array  # bool: env truncation, turn cap or context
  end_reason_B: jax.Array  # int32 index into END_REASONS
  fault_B: jax.Array  # int32 interpreter fault bits (non-zero: the episode crashed)
  env_state: EnvState  # final interpreter state (``draws``: every random draw, in order)
  steps: jax.Array  # [] decode steps taken

  @property
  def solved_B(self):
    return self.terminated_B & (self.reward_B >= 1.0)

  @property
  def crashed_B(self):
    return self.end_reason_B == FAULT

  @classmethod
  def pack(cls, state: DecodeState, ep, prompt_len_B) -> RolloutOutput:
    """Moves each sequence's valid cache slots to the front (traceable)."""
    valid_BS = state.cache.valid_BS
    B, S = valid_BS.shape
    dest_BS = jnp.where(valid_BS, jnp.cumsum(valid_BS, axis=1) - 1, S)
    rows = jnp.arange(B)[:, None]

    def pack(x_BS):
      return jnp.zeros_like(x_BS).at[rows, dest_BS].set(x_BS, mode="drop")

    return cls(
      tokens_BT=pack(state.tokens_BS),
      loss_mask_BT=pack(state.loss_mask_BS),
      logprobs_BT=pack(state.logprobs_BS),
      length_B=jnp.sum(valid_BS, axis=1, dtype=jnp.int32),
      prompt_len_B=prompt_len_B.astype(jnp.int32),
      reward_B=ep.reward_B,
      turns_B=ep.turns_B,
      terminated_B=ep.terminated_B,
      truncated_B=ep.truncated_B,
      end_reason_B=ep.reason_B,
      fault_B=ep.fault_B,
      env_state=ep.env,
      steps=state.step,
    )

  def to_host(self) -> RolloutOutput:
    return jax.tree.map(np.asarray, multihost.to_host(self))

  def to_trajectories(self, *, group_id, advantages=0.0, seq_len: int | None = None):
    """The agent-role `Trajectories` of these episodes (``seq_len`` defaults to the longest)."""
    h = self.to_host()
    longest = int(h.length_B.max(initial=0))
    seq_len = longest if seq_len is None else int(seq_len)
    if longest > seq_len:
      raise ValueError(f"sequence of length {longest} exceeds seq_len={seq_len}")
    n, width = h.tokens_BT.shape
    fit = lambda x: np.pad(x[:, :seq_len], ((0, 0), (0, max(0, seq_len - width))))
    mask = fit(h.loss_mask_BT).astype(np.float32)
    out = trajectories.empty(n, seq_len)
    return out.replace(
      tokens_BT=fit(h.tokens_BT).astype(np.int32),
      loss_mask_BT=mask,
      rollout_logprobs_BT=np.where(mask > 0, fit(h.logprobs_BT), 0.0).astype(np.float32),
      advantages_B=np.broadcast_to(np.asarray(advantages, np.float32), (n,)).copy(),
      rewards_B=h.reward_B.astype(np.float32),
      group_id_B=np.broadcast_to(np.asarray(group_id, np.int32), (n,)).copy(),
      turns_B=h.turns_B.astype(np.int32),
      valid_B=np.ones((n,), bool),
    )

  def episodes(self, tok, framing) -> EpisodeResult:
    """The host loop's result type: token lists, flags, errors and decoded transcripts."""
    h = self.to_host()
    n = h.length_B.shape[0]
    tokens, mask, logprobs, transcripts, errors = [], [], [], [], []
    for i in range(n):
      L = int(h.length_B[i])
      tokens.append(h.tokens_BT[i, :L].tolist())
      mask.append(h.loss_mask_BT[i, :L].astype(int).tolist())
      logprobs.append(h.logprobs_BT[i, :L].tolist())
      transcripts.append(_transcript(tokens[i], mask[i], int(h.prompt_len_B[i]), tok, framing))
      errors.append(
        f"fault: {', '.join(fault_names(int(h.fault_B[i])))}"
        if h.end_reason_B[i] == FAULT
        else None
      )
    crashed = h.end_reason_B == FAULT
    return EpisodeResult(
      tokens=tokens,
      loss_mask=mask,
      logprobs=logprobs,
      reward=h.reward_B.astype(np.float32),
      turns=h.turns_B.astype(np.int32),
      terminated=h.terminated_B.astype(bool),
      truncated=h.truncated_B.astype(bool),
      crashed=crashed,
      collateral=np.zeros(n, bool),
      errors=errors,
      transcripts=transcripts,
    )


def _transcript(tokens, mask, prompt_len, tok, framing) -> list[dict[str, str]]:
  """Role/content messages of one conversation, split at the sampled / forced boundaries."""
  nfp, nfs = len(framing.first_prefix), len(framing.first_suffix)
  msgs = [{"role": "user", "content": tok.decode(tokens[nfp : prompt_len - nfs])}]
  stops = set(tok.eos_ids)
  runs, start = [], prompt_len
  for j in range(prompt_len + 1, len(tokens) + 1):
    if j == len(tokens) or mask[j] != mask[start]:
      runs.append((bool(mask[start]), tokens[start:j]))
      start = j
  closed = True
  for sampled, run in runs:
    if sampled:
      closed = run[-1] in stops
      msgs.append({"role": "assistant", "content": tok.decode(run[:-1] if closed else run)})
    else:
      body = run[0 if closed else 1 :]
      body = body[len(framing.turn_prefix) : len(body) - len(framing.turn_suffix)]
      msgs.append({"role": "user", "content": tok.decode(body)})
  return msgs


@dataclasses.dataclass(frozen=True)
class ScriptedPolicy:
  """Logits processor: in scripted turn ``k`` the policy writes ``script[k]`` then
  ``stop_id``; a turn with an empty script, or past ``turns``, is sampled freely. A turn ends
  (and the next begins) when a forced token follows sampled ones. ``scripts`` (per sequence,
  per turn token tuples) is only for the host ``Engine``, whose processor state starts from
  static data; the on-device rollout starts it with `start`."""

  stop_id: int
  turns: int
  width: int
  scripts: tuple = ()

  def __post_init__(self):  # nested tuples: the processor is hashed as a static argument
    frozen = tuple(tuple(tuple(int(t) for t in turn) for turn in seq) for seq in self.scripts)
    object.__setattr__(self, "scripts", frozen)

  def init_state(self, batch: int):
    ids = np.zeros((batch, self.turns, self.width), np.int32)
    lens = np.zeros((batch, self.turns), np.int32)
    for b, per_turn in enumerate(self.scripts):
      for k, seq in enumerate(per_turn[: self.turns]):
        ids[b, k, : len(seq)] = seq
        lens[b, k] = len(seq)
    return self._state(jnp.asarray(ids), jnp.asarray(lens))

  def _state(self, ids_BKW, len_BK):
    B = ids_BKW.shape[0]
    zeros = jnp.zeros((B,), jnp.int32)
    return {
      "ids": ids_BKW,
      "len": len_BK,
      "turn": zeros,
      "pos": zeros,
      "in_turn": jnp.zeros((B,), bool),
    }

  def start(self, batch, solution):
    """On-device initial state from a `RolloutBatch`: its scripts, or the rendered solution
    (``solution``: `Tokens` per episode) in every turn where ``oracle_B``."""
    W = self.width
    sol_ids = (
      solution.ids[:, :W]
      if solution.ids.shape[1] >= W
      else jnp.pad(solution.ids, ((0, 0), (0, W - solution.ids.shape[1])))
    )
    sol_len = jnp.minimum(solution.length, W)
    B = sol_ids.shape[0]
    oracle = batch.oracle_B
    ids = jnp.where(
      oracle[:, None, None],
      jnp.broadcast_to(sol_ids[:, None, :], (B, self.turns, W)),
      batch.script_BKW,
    )
    lens = jnp.where(oracle[:, None], sol_len[:, None], batch.script_len_BK)
    return self._state(ids.astype(jnp.int32), lens.astype(jnp.int32))

  def mask(self, st, logits_BV):
    k = jnp.clip(st["turn"], 0, self.turns - 1)
    n_B = jnp.take_along_axis(st["len"], k[:, None], axis=1)[:, 0]
    scripted_B = (st["turn"] < self.turns) & (n_B > 0)
    row_BW = jnp.take_along_axis(st["ids"], k[:, None, None], axis=1)[:, 0]
    nxt = jnp.take_along_axis(row_BW, jnp.clip(st["pos"], 0, self.width - 1)[:, None], axis=1)
    want_B = jnp.where(st["pos"] < n_B, nxt[:, 0], self.stop_id)
    only = jnp.arange(logits_BV.shape[1])[None, :] == want_B[:, None]
    return jnp.where(scripted_B[:, None] & ~only, -jnp.inf, logits_BV)

  def update(self, st, token_B, was_sampled_B):
    new_turn_B = ~was_sampled_B & st["in_turn"]
    return {
      **st,
      "turn": st["turn"] + new_turn_B,
      "pos": jnp.where(was_sampled_B, st["pos"] + 1, 0),
      "in_turn": was_sampled_B,
    }
