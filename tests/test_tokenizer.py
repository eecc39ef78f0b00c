"""Tokenizer wrapper: chat template ids, eos ids, and the exact token->bytes table."""

import numpy as np
import pytest
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.tokenizer import TokenizerError, load_tokenizer

TEXTS = [
  "Guess the number: \\boxed{-17}",
  "Sort 9, 2, 6 -> \\boxed{2, 6, 9}\n\nHINT: think.",
  "ünïcödé 🎲 tabs\tand  double  spaces",
  "<|im_start|>user\nhi<|im_end|>",
]


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def tok(request):
  return load_tokenizer(tiny_tokenizer_dir() if request.param == "tiny" else "smollm2")


def test_token_bytes_concatenate_to_decoded_text(tok):
  for text in TEXTS:
    ids = tok.encode(text)
    assert b"".join(tok.token_bytes[i] for i in ids) == tok.decode(ids).encode("utf-8")
    assert tok.decode(ids) == text


def test_token_bytes_on_random_sequences(tok):
  def is_utf8(b):
    try:
      b.decode("utf-8")
      return True
    except UnicodeDecodeError:
      return False

  pool = np.asarray([i for i, b in enumerate(tok.token_bytes) if b and is_utf8(b)])
  assert len(pool) > 0.5 * tok.vocab_size
  rng = np.random.RandomState(0)
  for _ in range(300):
    ids = [int(i) for i in rng.choice(pool, 12)]
    assert tok.decode(ids).encode("utf-8") == b"".join(tok.token_bytes[i] for i in ids)


def test_chat_template_ids_and_eos(tok):
  msgs = [{"role": "user", "content": "What is 2+2?"}]
  ids = tok.apply_chat_template(msgs)
  assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
  text = tok.decode(ids)
  assert text.endswith("<|im_start|>assistant\n")
  assert "What is 2+2?" in text
  im_end = tok.token_id("<|im_end|>")
  assert im_end in tok.eos_ids
  assert tok.special_mask[im_end] and not tok.special_mask[tok.encode("What")[0]]
  no_gen = tok.apply_chat_template(msgs, add_generation_prompt=False)
  assert ids[: len(no_gen)] == no_gen and len(ids) > len(no_gen)


def test_bytes_array_matches_table(tok):
  arr, lens = tok.token_bytes_array()
  assert arr.shape[0] == lens.shape[0] == tok.vocab_size
  for i in [0, 1, 2, tok.vocab_size // 2, tok.vocab_size - 1]:
    assert bytes(arr[i, : lens[i]]) == tok.token_bytes[i]


def test_bad_paths_raise():
  with pytest.raises(TokenizerError, match="does not exist"):
    load_tokenizer("/nonexistent/tokenizer/dir")
