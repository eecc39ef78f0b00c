"""Grounding corpus: short documents that give the designer a concept to build a game on.

The corpus is a JSONL file, one object per line with a string ``text`` field (other fields are
ignored; blank lines are skipped). Each document is truncated to its first ``max_words``
whitespace-separated words (default 6000), keeping the original spacing and line breaks up to
the cut. Every generation attempt draws a fresh document uniformly at random.

Draw ``i`` of a sampler with seed ``s`` is a pure function of ``(s, i)``, so the sampler's whole
state is ``{"seed", "draws"}``: a resumed run continues with exactly the documents an
uninterrupted run would have drawn.

A small corpus of original short texts ships with the package (:data:`DEFAULT_CORPUS`) for
tests and the CPU config.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

DEFAULT_CORPUS = Path(__file__).resolve().parent / "data" / "corpus.jsonl"
DEFAULT_MAX_WORDS = 6000

_WORD = re.compile(r"\S+")


class CorpusError(ValueError):
  """A corpus file that is missing, unreadable or malformed (one-line message)."""


def truncate_words(text: str, max_words: int) -> str:
  """The prefix of ``text`` holding its first ``max_words`` words (original spacing kept,
  surrounding whitespace stripped)."""
  if max_words < 1:
    raise ValueError(f"max_words must be >= 1, got {max_words}")
  end = None
  for i, m in enumerate(_WORD.finditer(text)):
    if i + 1 == max_words:
      end = m.end()
      break
  return (text if end is None else text[:end]).strip()


def load_corpus(path: str | os.PathLike, max_words: int = DEFAULT_MAX_WORDS) -> list[str]:
  """Reads a JSONL corpus and returns its documents, each truncated to ``max_words`` words.

  Raises :class:`CorpusError` with a one-line message naming the file (and line) when the file
  is missing, unreadable, not UTF-8, has a line that is not a JSON object with a non-empty
  string ``text``, or holds no documents.
  """
  path = Path(path)
  if not path.exists():
    raise CorpusError(f"corpus file not found: {path}")
  if not path.is_file():
    raise CorpusError(f"corpus path is not a file: {path}")
  try:
    raw = path.read_text(encoding="utf-8")
  except UnicodeDecodeError as e:
    raise CorpusError(f"corpus file {path} is not valid UTF-8 (byte {e.start})") from None
  except OSError as e:
    raise CorpusError(f"cannot read corpus file {path}: {e.strerror or e}") from None
  docs = []
  for lineno, line in enumerate(raw.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      obj = json.loads(line)
    except json.JSONDecodeError as e:
      raise CorpusError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
      raise CorpusError(f"{path}:{lineno}: expected a JSON object with a 'text' field")
    text = obj.get("text")
    if not isinstance(text, str):
      raise CorpusError(f"{path}:{lineno}: missing string field 'text'")
    if not text.strip():
      raise CorpusError(f"{path}:{lineno}: field 'text' is empty")
    docs.append(truncate_words(text, max_words))
  if not docs:
    raise CorpusError(f"corpus file {path} holds no documents")
  return docs


class CorpusSampler:
  """Seeded uniform sampling of documents, one fresh draw per call of :meth:`next`."""

  def __init__(self, documents: Sequence[str], seed: int = 0):
    if not documents:
      raise CorpusError("corpus holds no documents")
    if seed < 0:
      raise ValueError(f"corpus seed must be >= 0, got {seed}")
    self.documents = list(documents)
    self.seed = int(seed)
    self.draws = 0

  def index(self, draw: int) -> int:
    """Document index of draw number ``draw`` (a pure function of the seed and ``draw``)."""
    rng = np.random.default_rng(np.random.SeedSequence([self.seed, int(draw)]))
    return int(rng.integers(len(self.documents)))

  def next(self) -> str:
    doc = self.documents[self.index(self.draws)]
    self.draws += 1
    return doc

  def to_state(self) -> dict:
    return {"seed": self.seed, "draws": self.draws, "num_documents": len(self.documents)}

  @classmethod
  def from_state(cls, documents: Sequence[str], state: dict) -> CorpusSampler:
    """Restores a sampler over the same documents; refuses a corpus of a different size."""
    if state["num_documents"] != len(documents):
      raise CorpusError(
        f"corpus changed since the checkpoint: it held {state['num_documents']} documents, "
        f"now {len(documents)}"
      )
    sampler = cls(documents, seed=state["seed"])
    sampler.draws = int(state["draws"])
    return sampler
