"""The ``Trajectories`` batch: the one format every rollout path produces and the update consumes.

Layout and conventions (every producer and consumer relies on them):

* Sequences are left-aligned and right-padded with ``PAD_ID`` to a common length ``T``; causal
  attention means right padding never influences the real tokens, so no attention mask is
  carried.
* ``rollout_logprobs_BT[b, t]`` is the sampler's log-probability of ``tokens_BT[b, t]`` given
  ``tokens_BT[b, :t]``, i.e. ``log_softmax(logits[b, t - 1] / temperature)[tokens_BT[b, t]]``
  (before any top-k / top-p truncation). Position 0 has no prediction, so its mask is always 0.
* ``loss_mask_BT`` is 1.0 on tokens the policy sampled and is trained on (designer: the whole
  response; agent: assistant tokens) and 0.0 on prompt, environment/feedback and pad tokens.
  ``rollout_logprobs_BT`` is 0 wherever the mask is 0.
* ``role_B`` is :data:`ROLE_AGENT` or :data:`ROLE_DESIGNER`. ``group_id_B`` identifies the GRPO
  group (same prompt / environment) within a role; advantages are normalised per (role, group).
* Pad rows (``valid_B`` False) have an all-zero mask and zero advantage; they still count in the
  global batch size used by the ``seq_mean_*`` loss reductions.

The struct is a pytree (flax ``struct.dataclass``) holding numpy arrays on the host or jax arrays
on device; the host-side helpers below (construction, concatenation, padding) use numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from flax import struct

ROLE_AGENT = 0
ROLE_DESIGNER = 1
ROLE_NAMES = {ROLE_AGENT: "agent", ROLE_DESIGNER: "designer"}
PAD_ID = 0
BATCH_AXES = ("batch",)  # logical axis of the leading dimension of every field


@struct.dataclass
class Trajectories:
  tokens_BT: jax.Array  # int32 token ids, right-padded with PAD_ID
  loss_mask_BT: jax.Array  # float32, 1 on sampled (trained) tokens
  rollout_logprobs_BT: jax.Array  # float32 sampler log-prob of token t given < t; 0 off-mask
  advantages_B: jax.Array  # float32 per-sample advantage (broadcast over the sample's tokens)
  role_B: jax.Array  # int32 ROLE_AGENT / ROLE_DESIGNER
  rewards_B: jax.Array  # float32 raw reward (for logging and advantage computation)
  group_id_B: jax.Array  # int32 GRPO group within the role
  valid_B: jax.Array  # bool, False on pad rows
  turns_B: jax.Array  # int32 number of agent turns (1 for designer samples)

  @property
  def batch_size(self) -> int:
    return self.tokens_BT.shape[0]

  @property
  def seq_len(self) -> int:
    return self.tokens_BT.shape[1]

  def num_loss_tokens(self) -> int:
    return int(np.asarray(self.loss_mask_BT).sum())

  def select(self, idx) -> Trajectories:
    """Rows ``idx`` (host-side: an index array or boolean mask over the batch)."""
    return jax.tree.map(lambda x: np.asarray(x)[idx], self)


def empty(batch_size: int, seq_len: int) -> Trajectories:
  """``batch_size`` pad rows of length ``seq_len`` (all masks zero, ``valid_B`` False)."""
  b, t = batch_size, seq_len
  return Trajectories(
    tokens_BT=np.full((b, t), PAD_ID, np.int32),
    loss_mask_BT=np.zeros((b, t), np.float32),
    rollout_logprobs_BT=np.zeros((b, t), np.float32),
    advantages_B=np.zeros((b,), np.float32),
    role_B=np.full((b,), ROLE_AGENT, np.int32),
    rewards_B=np.zeros((b,), np.float32),
    group_id_B=np.full((b,), -1, np.int32),
    valid_B=np.zeros((b,), bool),
    turns_B=np.zeros((b,), np.int32),
  )


def _per_sample(value, n, dtype, name):
  arr = (
    np.broadcast_to(np.asarray(value, dtype), (n,))
    if np.ndim(value) == 0
    else np.asarray(value, dtype)
  )
  if arr.shape != (n,):
    raise ValueError(f"{name} has shape {arr.shape}, expected ({n},)")
  return np.array(arr)


def from_sequences(
  tokens: Sequence[Sequence[int]],
  loss_mask: Sequence[Sequence[float]],
  logprobs: Sequence[Sequence[float]],
  *,
  role: int | Sequence[int],
  rewards: Sequence[float] | float = 0.0,
  advantages: Sequence[float] | float = 0.0,
  group_id: Sequence[int] | int = 0,
  turns: Sequence[int] | int = 1,
  seq_len: int | None = None,
) -> Trajectories:
  """Builds a batch from python lists of variable-length sequences (one entry per sample).

  ``loss_mask`` and ``logprobs`` are per token, aligned with ``tokens`` (see the module
  docstring for the log-prob convention). ``seq_len`` defaults to the longest sequence; a
  sequence longer than ``seq_len`` is an error (silent truncation would drop trained tokens).
  """
  n = len(tokens)
  if len(loss_mask) != n or len(logprobs) != n:
    raise ValueError(f"{n} token sequences but {len(loss_mask)} masks, {len(logprobs)} logprobs")
  lengths = [len(t) for t in tokens]
  t_max = max(lengths, default=0)
  seq_len = t_max if seq_len is None else seq_len
  if t_max > seq_len:
    raise ValueError(f"sequence of length {t_max} exceeds seq_len={seq_len}")
  out = empty(n, seq_len)
  for i, (tok, msk, lp) in enumerate(zip(tokens, loss_mask, logprobs)):
    if len(msk) != len(tok) or len(lp) != len(tok):
      raise ValueError(f"sample {i}: {len(tok)} tokens, {len(msk)} mask, {len(lp)} logprobs")
    if len(tok) and msk[0]:
      raise ValueError(f"sample {i}: position 0 has no prediction; its loss mask must be 0")
    out.tokens_BT[i, : len(tok)] = tok
    m = np.asarray(msk, np.float32)
    out.loss_mask_BT[i, : len(tok)] = m
    out.rollout_logprobs_BT[i, : len(tok)] = np.where(m > 0, np.asarray(lp, np.float32), 0.0)
  roles = _per_sample(role, n, np.int32, "role")
  bad = set(np.unique(roles).tolist()) - set(ROLE_NAMES)
  if bad:
    raise ValueError(f"unknown roles {sorted(bad)}; expected {sorted(ROLE_NAMES)}")
  return out.replace(
    role_B=roles,
    rewards_B=_per_sample(rewards, n, np.float32, "rewards"),
    advantages_B=_per_sample(advantages, n, np.float32, "advantages"),
    group_id_B=_per_sample(group_id, n, np.int32, "group_id"),
    turns_B=_per_sample(turns, n, np.int32, "turns"),
    valid_B=np.ones((n,), bool),
  )


def pad_length(traj: Trajectories, seq_len: int) -> Trajectories:
  """Right-pads every sequence to ``seq_len`` (an error if any field is longer)."""
  t = traj.seq_len
  if t > seq_len:
    raise ValueError(f"cannot pad length {t} down to {seq_len}")
  if t == seq_len:
    return traj
  widths = ((0, 0), (0, seq_len - t))
  return traj.replace(
    tokens_BT=np.pad(np.asarray(traj.tokens_BT), widths, constant_values=PAD_ID),
    loss_mask_BT=np.pad(np.asarray(traj.loss_mask_BT), widths),
    rollout_logprobs_BT=np.pad(np.asarray(traj.rollout_logprobs_BT), widths),
  )


def concatenate(parts: Sequence[Trajectories], seq_len: int | None = None) -> Trajectories:
  """Stacks batches along the batch axis, right-padding all to a common length."""
  if not parts:
    raise ValueError("nothing to concatenate")
  seq_len = max(p.seq_len for p in parts) if seq_len is None else seq_len
  parts = [pad_length(p, seq_len) for p in parts]
  return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *parts)


def pad_batch(traj: Trajectories, batch_size: int) -> Trajectories:
  """Appends pad rows up to ``batch_size`` (an error if the batch is already larger)."""
  if traj.batch_size > batch_size:
    raise ValueError(f"batch of {traj.batch_size} exceeds batch_size={batch_size}")
  if traj.batch_size == batch_size:
    return traj
  return concatenate([traj, empty(batch_size - traj.batch_size, traj.seq_len)])


def mixed_batch(
  designer: Trajectories | None,
  agent: Trajectories | None,
  global_batch: int,
  seq_len: int | None = None,
) -> tuple[Trajectories, int]:
  """The SPADE update batch: designer samples first, then agent samples, trimmed or padded to
  ``global_batch`` rows. Returns the batch and how many samples were trimmed off the end."""
  parts = [p for p in (designer, agent) if p is not None and p.batch_size]
  if not parts:
    if seq_len is None:
      raise ValueError("an empty batch needs an explicit seq_len")
    return empty(global_batch, seq_len), 0
  batch = concatenate(parts, seq_len)
  trimmed = max(0, batch.batch_size - global_batch)
  if trimmed:
    batch = batch.select(np.arange(global_batch))
  return pad_batch(batch, global_batch), trimmed


def length_segments(batch: Trajectories, n_first: int, lengths: tuple[int, int]):
  """``batch`` as segments trained without a common length (`rl.update.loss_and_grads`): its
  first ``n_first`` rows (e.g. the designer's) may be longer or shorter than the rest. The split
  is at the smallest power of two ``s >= n_first`` (few distinct shapes, so few compilations);
  rows ``[0, s)`` are cut to ``lengths[0]`` (or the longer of the two when they include rows of
  the rest), rows ``[s, B)`` to ``lengths[1]``. Returns ``batch`` itself when there is nothing to
  split (``s`` is 0 or ``B``, or both lengths equal); the loss is the same either way."""
  B, T = batch.batch_size, batch.seq_len
  s = 0 if n_first <= 0 else 1 << (n_first - 1).bit_length()
  if s == 0 or s >= B or lengths[0] == lengths[1]:
    return batch
  first = lengths[0] if s == n_first else max(lengths)
  if max(first, lengths[1]) > T:
    raise ValueError(f"segment lengths {first}, {lengths[1]} exceed the batch's {T}")
  rows = np.arange(B)
  parts = []
  for idx, length in ((rows[:s], first), (rows[s:], lengths[1])):
    part = batch.select(idx)
    if np.asarray(part.loss_mask_BT)[:, length:].any():
      raise ValueError(f"a row trains beyond its segment's length {length}")
    parts.append(
      part.replace(
        tokens_BT=np.asarray(part.tokens_BT)[:, :length],
        loss_mask_BT=np.asarray(part.loss_mask_BT)[:, :length],
        rollout_logprobs_BT=np.asarray(part.rollout_logprobs_BT)[:, :length],
      )
    )
  return tuple(parts)


def shardings(mesh, traj: Trajectories):
  """NamedShardings placing every field's batch axis on the mesh's batch axes."""
  from spade_jax import sharding

  return jax.tree.map(
    lambda x: sharding.named_sharding(mesh, BATCH_AXES + (None,) * (np.ndim(x) - 1), np.shape(x)),
    traj,
  )
