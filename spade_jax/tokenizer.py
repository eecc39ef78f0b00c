"""Tokenizer wrapper: encode/decode, chat template as token ids, and the token->bytes table.

``token_bytes[i]`` is the exact byte string token ``i`` contributes when a sequence is decoded
(byte-level BPE tokens map back through the GPT-2 byte alphabet; SentencePiece-style tokens map
``▁`` to a space and ``<0xNN>`` to the raw byte). Special tokens contribute their literal text
and are flagged in ``special_mask``. The on-device answer parser runs over this table.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

# Token strings that end an assistant turn in common chat templates.
_TURN_END_TOKENS = (
  "<|im_end|>",
  "<|endoftext|>",
  "<|eot_id|>",
  "<|end_of_text|>",
  "<|end|>",
  "</s>",
)


class TokenizerError(ValueError):
  pass


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
  """Inverse of GPT-2's bytes_to_unicode map (printable stand-ins for the 256 bytes)."""
  bs = (
    list(range(ord("!"), ord("~") + 1))
    + list(range(ord("¡"), ord("¬") + 1))
    + list(range(ord("®"), ord("ÿ") + 1))
  )
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return {chr(c): b for b, c in zip(bs, cs)}


def _decoder_kind(backend_json: dict[str, Any]) -> str:
  dec = backend_json.get("decoder") or {}
  kinds = {dec.get("type")}
  for sub in dec.get("decoders", []) or []:
    kinds.add(sub.get("type"))
  if "ByteLevel" in kinds:
    return "byte_level"
  if "ByteFallback" in kinds or "Metaspace" in kinds or "Replace" in kinds:
    return "sentencepiece"
  if "WordPiece" in kinds:
    return "wordpiece"
  raise TokenizerError(
    f"unsupported tokenizer decoder {sorted(k for k in kinds if k)}: "
    "cannot build the token->bytes table"
  )


class Tokenizer:
  """Thin wrapper over a ``transformers`` fast tokenizer."""

  def __init__(self, hf_tokenizer, eos_ids: tuple[int, ...] | None = None):
    self.hf = hf_tokenizer
    self.vocab_size = len(hf_tokenizer)
    self._backend = json.loads(hf_tokenizer.backend_tokenizer.to_str())
    self.special_ids = frozenset(int(i) for i in hf_tokenizer.all_special_ids) | frozenset(
      int(i) for i, t in hf_tokenizer.added_tokens_decoder.items() if t.special
    )
    self.eos_ids = tuple(eos_ids) if eos_ids is not None else self._find_eos_ids()
    pad = hf_tokenizer.pad_token_id
    self.pad_id = int(pad) if pad is not None else self.eos_ids[0]

  # --------------------------------------------------------------------------- text <-> ids
  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

  def decode(self, ids, skip_special_tokens: bool = False) -> str:
    return self.hf.decode(
      [int(i) for i in ids],
      skip_special_tokens=skip_special_tokens,
      clean_up_tokenization_spaces=False,
    )

  def apply_chat_template(
    self, messages: list[dict[str, str]], add_generation_prompt=True, **kwargs
  ) -> list[int]:
    if not getattr(self.hf, "chat_template", None):
      raise TokenizerError("this tokenizer has no chat template")
    out = self.hf.apply_chat_template(
      messages, add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs
    )
    if isinstance(out, dict) or hasattr(out, "keys"):  # transformers 5 returns a BatchEncoding
      out = out["input_ids"]
    return [int(i) for i in out]

  def render_chat(self, messages, add_generation_prompt=True, **kwargs) -> str:
    return self.hf.apply_chat_template(
      messages, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
    )

  # --------------------------------------------------------------------------- special ids
  def _find_eos_ids(self) -> tuple[int, ...]:
    ids = []
    if self.hf.eos_token_id is not None:
      ids.append(int(self.hf.eos_token_id))
    vocab = self.hf.get_vocab()
    for tok in _TURN_END_TOKENS:
      if tok in vocab and vocab[tok] in self.special_ids:
        ids.append(int(vocab[tok]))
    if not ids:
      raise TokenizerError("cannot determine end-of-turn token ids (no eos token)")
    return tuple(dict.fromkeys(ids))

  def token_id(self, token: str) -> int:
    vocab = self.hf.get_vocab()
    if token not in vocab:
      raise TokenizerError(f"token {token!r} is not in the vocabulary")
    return int(vocab[token])

  # --------------------------------------------------------------------------- bytes table
  @functools.cached_property
  def token_bytes(self) -> list[bytes]:
    """Per token id, the bytes it contributes to a decoded sequence."""
    kind = _decoder_kind(self._backend)
    id_to_tok = {i: t for t, i in self.hf.get_vocab().items()}
    bd = _byte_decoder()
    out: list[bytes] = []
    for i in range(self.vocab_size):
      tok = id_to_tok.get(i)
      if tok is None:
        out.append(b"")
      elif i in self.special_ids or i in self.hf.added_tokens_decoder:
        out.append(tok.encode("utf-8"))
      elif kind == "byte_level":
        try:
          out.append(bytes(bd[c] for c in tok))
        except KeyError:
          out.append(tok.encode("utf-8"))
      elif kind == "sentencepiece":
        if len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
          out.append(bytes([int(tok[3:5], 16)]))
        else:
          out.append(tok.replace("\u2581", " ").encode("utf-8"))
      else:  # wordpiece
        out.append(tok[2:].encode() if tok.startswith("##") else b" " + tok.encode())
    return out

  @functools.cached_property
  def special_mask(self) -> np.ndarray:
    mask = np.zeros(self.vocab_size, bool)
    mask[sorted(i for i in self.special_ids if i < self.vocab_size)] = True
    return mask

  def token_bytes_array(self, max_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes_VL uint8, lengths_V int32)``: the table padded to a fixed width for devices."""
    tb = self.token_bytes
    width = max_len or max(1, max(len(b) for b in tb))
    arr = np.zeros((len(tb), width), np.uint8)
    lens = np.zeros(len(tb), np.int32)
    for i, b in enumerate(tb):
      if len(b) > width:
        raise TokenizerError(f"token {i} has {len(b)} bytes > table width {width}")
      arr[i, : len(b)] = np.frombuffer(b, np.uint8)
      lens[i] = len(b)
    return arr, lens


def import_transformers():
  """``transformers``, imported without its "PyTorch was not found" advice: tokenizers and
  configs need no torch (only GGUF checkpoints do, through the ``[gguf]`` extra), so a default
  install would otherwise start every run with a warning that does not apply."""
  if "transformers" not in sys.modules:
    old = os.environ.get(_NO_ADVICE)
    os.environ[_NO_ADVICE] = "1"
    try:
      import transformers  # noqa: F401
    finally:
      if old is None:
        os.environ.pop(_NO_ADVICE, None)
      else:
        os.environ[_NO_ADVICE] = old
  return sys.modules["transformers"]


_NO_ADVICE = "TRANSFORMERS_NO_ADVISORY_WARNINGS"


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
  """Loads a tokenizer from an HF directory, a ``.gguf`` file, ``smollm2``, or a hub id."""
  AutoTokenizer = import_transformers().AutoTokenizer

  from spade_jax.models.checkpoints import CheckpointError, resolve_path

  try:
    p = resolve_path(path)
  except CheckpointError as e:
    raise TokenizerError(str(e)) from e
  try:
    if p.is_file() and p.suffix == ".gguf":
      hf = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    elif p.is_dir():
      hf = AutoTokenizer.from_pretrained(str(p))
    else:
      raise TokenizerError(f"{p}: expected a tokenizer directory or a .gguf file")
  except TokenizerError:
    raise
  except Exception as e:
    raise TokenizerError(f"{p}: cannot load tokenizer ({type(e).__name__}: {e})") from e
  if not getattr(hf, "is_fast", False):
    raise TokenizerError(f"{p}: a fast (tokenizers-backed) tokenizer is required")
  eos = _generation_eos(p)
  tok = Tokenizer(hf)
  if eos:
    tok.eos_ids = tuple(dict.fromkeys(list(tok.eos_ids) + eos))
  return tok


def _generation_eos(p: Path) -> list[int]:
  gen = p / "generation_config.json" if p.is_dir() else None
  if gen is None or not gen.exists():
    return []
  try:
    eos = json.loads(gen.read_text()).get("eos_token_id")
  except json.JSONDecodeError:
    return []
  if eos is None:
    return []
  return [int(e) for e in (eos if isinstance(eos, list) else [eos])]
