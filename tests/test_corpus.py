"""Grounding corpus: loading, word truncation, one-line errors, seeded uniform sampling, exact
resume, and the shipped corpus."""

import json
from pathlib import Path

import numpy as np
import pytest

from spade_jax.spade import corpus as C


def _write(path: Path, lines):
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return path


def test_truncate_words_keeps_spacing():
  assert C.truncate_words("a  b\nc d e", 3) == "a  b\nc"
  assert C.truncate_words("  one two  ", 5) == "one two"
  assert C.truncate_words("x y", 2) == "x y"
  with pytest.raises(ValueError):
    C.truncate_words("x", 0)


def test_load_truncates_and_skips_blank_lines(tmp_path):
  p = _write(
    tmp_path / "c.jsonl",
    [json.dumps({"text": "w1 w2 w3 w4 w5", "id": 1}), "", json.dumps({"text": "short"})],
  )
  assert C.load_corpus(p, max_words=3) == ["w1 w2 w3", "short"]
  assert C.load_corpus(p) == ["w1 w2 w3 w4 w5", "short"]


@pytest.mark.parametrize(
  "lines, message",
  [
    (['{"text": "ok"}', "{not json"], r"c\.jsonl:2: not valid JSON"),
    (['["text"]'], r":1: expected a JSON object"),
    (['{"body": "x"}'], r":1: missing string field 'text'"),
    (['{"text": 3}'], r":1: missing string field 'text'"),
    (['{"text": "   "}'], r":1: field 'text' is empty"),
    ([""], r"holds no documents"),
  ],
)
def test_malformed_corpus_errors(tmp_path, lines, message):
  p = _write(tmp_path / "c.jsonl", lines)
  with pytest.raises(C.CorpusError, match=message) as e:
    C.load_corpus(p)
  assert "\n" not in str(e.value)


def test_missing_unreadable_and_binary_files(tmp_path, monkeypatch):
  with pytest.raises(C.CorpusError, match="corpus file not found: .*nope.jsonl"):
    C.load_corpus(tmp_path / "nope.jsonl")
  with pytest.raises(C.CorpusError, match="not a file"):
    C.load_corpus(tmp_path)
  bad = tmp_path / "bin.jsonl"
  bad.write_bytes(b'{"text": "\xff\xfe"}\n')
  with pytest.raises(C.CorpusError, match="not valid UTF-8"):
    C.load_corpus(bad)
  ok = _write(tmp_path / "ok.jsonl", ['{"text": "x"}'])

  def deny(self, *a, **k):
    raise PermissionError(13, "Permission denied")

  monkeypatch.setattr(Path, "read_text", deny)  # tests run as root: chmod would not stop reads
  with pytest.raises(C.CorpusError, match="cannot read corpus file .*ok.jsonl: Permission denied"):
    C.load_corpus(ok)


def test_sampler_is_seeded_uniform_and_fresh_per_draw():
  docs = [f"doc{i}" for i in range(10)]
  a, b, c = C.CorpusSampler(docs, 1), C.CorpusSampler(docs, 1), C.CorpusSampler(docs, 2)
  seq_a = [a.next() for _ in range(50)]
  assert seq_a == [b.next() for _ in range(50)]
  assert seq_a != [c.next() for _ in range(50)]
  assert a.draws == 50 and len(set(seq_a)) > 1
  counts = np.bincount([C.CorpusSampler(docs, 3).index(i) for i in range(5000)], minlength=10)
  chi2 = float(np.sum((counts - 500.0) ** 2 / 500.0))
  assert chi2 < 27.9, counts  # 9 dof, p = 0.001


def test_sampler_resume_is_exact():
  docs = [f"doc{i}" for i in range(7)]
  ref = C.CorpusSampler(docs, 5)
  expected = [ref.next() for _ in range(12)]
  s = C.CorpusSampler(docs, 5)
  first = [s.next() for _ in range(5)]
  state = json.loads(json.dumps(s.to_state()))
  back = C.CorpusSampler.from_state(docs, state)
  assert first + [back.next() for _ in range(7)] == expected
  with pytest.raises(C.CorpusError, match="corpus changed"):
    C.CorpusSampler.from_state(docs[:-1], state)
  with pytest.raises(C.CorpusError):
    C.CorpusSampler([], 0)


def test_shipped_corpus():
  assert C.DEFAULT_CORPUS.is_file()
  docs = C.load_corpus(C.DEFAULT_CORPUS)
  assert 20 <= len(docs) <= 40 and len(set(docs)) == len(docs)
  words = [len(d.split()) for d in docs]
  assert min(words) >= 150 and max(words) <= 600, words
  assert C.load_corpus(C.DEFAULT_CORPUS, max_words=40)[0].split() == docs[0].split()[:40]
