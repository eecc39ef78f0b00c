"""Shared, cached fixtures for the environment tests (tokenizers, compiled interpreter calls)."""

from __future__ import annotations

import functools

from hf_fixtures import tiny_tokenizer_dir


@functools.cache
def tokenizer(name: str):
  """``"tiny"`` (the offline test BPE) or ``"smollm2"`` (SmolLM2-135M's GGUF tokenizer)."""
  from spade_jax.tokenizer import load_tokenizer

  return load_tokenizer(tiny_tokenizer_dir() if name == "tiny" else name)


@functools.cache
def parse_tables(name: str):
  from spade_jax.envs.ir.parse import make_parse_tables

  return make_parse_tables(tokenizer(name).token_bytes)


def encode_batch(tok, texts, width: int):
  """Token ids of ``texts`` padded to ``width`` -> (ids [N, width], lengths [N])."""
  import numpy as np

  ids = np.zeros((len(texts), width), np.int32)
  lens = np.zeros(len(texts), np.int32)
  for i, t in enumerate(texts):
    e = tok.encode(t)
    assert len(e) <= width, f"{t!r} needs {len(e)} tokens > {width}"
    ids[i, : len(e)] = e
    lens[i] = len(e)
  return ids, lens


B = 64  # every batched interpreter call in the env tests uses this batch: one compilation


@functools.cache
def batched(tok_name: str = "tiny"):
  """Jitted, vmapped interpreter calls shared by the env test modules:

  * ``reset(keys, programs, tape, tape_len) -> (obs, state, solution_tokens)``
  * ``step_text(keys, state, ids, lengths, programs)``: parse the answer tokens on device,
    then `ProgramEnv.transition`.
  """
  import types

  import jax

  from spade_jax.envs.ir.interpreter import ProgramEnv
  from spade_jax.envs.ir.parse import parse_tokens
  from spade_jax.envs.ir.program import DEFAULT_CONFIG

  env = ProgramEnv(DEFAULT_CONFIG)
  tables = parse_tables(tok_name)

  def reset(key, program, tape, tape_len):
    obs, state = env.reset_with_tape(key, program, tape, tape_len)
    return obs, state, env.render_solution(state, program)

  def step_text(key, state, ids, length, program):
    action = parse_tokens(ids, length, tables, DEFAULT_CONFIG.list_len)
    return env.transition(key, state, action, program)

  return types.SimpleNamespace(
    reset=jax.jit(jax.vmap(reset)), step_text=jax.jit(jax.vmap(step_text))
  )


def _pad(items, fill):
  assert len(items) <= B
  return list(items) + [fill] * (B - len(items))


def reset_batch(programs, tapes=None, seed=0, tok_name="tiny"):
  """Resets up to ``B`` programs (padded to ``B``) -> (obs, state, solution tokens); ``tapes``
  optionally gives per-episode draws to replay."""
  import jax
  import numpy as np

  from spade_jax.envs.ir.program import DEFAULT_CONFIG, stack_programs

  tape = np.zeros((B, DEFAULT_CONFIG.n_draws), np.int32)
  tape_len = np.zeros(B, np.int32)
  for i, t in enumerate(tapes or []):
    tape[i, : len(t)] = t
    tape_len[i] = len(t)
  keys = jax.random.split(jax.random.key(seed), B)
  programs = stack_programs(_pad(programs, programs[-1]))
  return batched(tok_name).reset(keys, programs, tape, tape_len)


def step_batch(state, programs, texts, seed=1, tok_name="tiny", width=96):
  """Steps ``B`` episodes with answer texts (parsed on device from their token ids)."""
  import jax

  from spade_jax.envs.ir.program import stack_programs

  ids, lens = encode_batch(tokenizer(tok_name), _pad(texts, ""), width)
  keys = jax.random.split(jax.random.key(seed), B)
  programs = stack_programs(_pad(programs, programs[-1]))
  return batched(tok_name).step_text(keys, state, ids, lens, programs)
