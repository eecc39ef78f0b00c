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
  from spade_jax.envs.parse import make_parse_tables

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
