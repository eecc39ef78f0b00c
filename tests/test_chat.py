"""Chat framing: token-level first prompt and feedback deltas equal the chat template."""

import pytest
from hf_fixtures import tiny_tokenizer_dir

from spade_jax.rollout.chat import ChatFraming, FramingError
from spade_jax.tokenizer import load_tokenizer


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def tok(request):
  return load_tokenizer(tiny_tokenizer_dir() if request.param == "tiny" else "smollm2")


@pytest.mark.parametrize("system", [None, "You play games. Answer in \\boxed{}."])
def test_multi_turn_framing_equals_template(tok, system):
  framing = ChatFraming.from_tokenizer(tok, system=system)
  sys_msgs = [{"role": "system", "content": system}] if system else []
  user = ["Guess a number from 1 to 10.", "Too low.", "Too high! 2 turns left.", "x"]
  answers = ["\\boxed{5}", "I pick \\boxed{8}", "\\boxed{7}"]
  ids = framing.first_prompt(tok, user[0])
  conv = sys_msgs + [{"role": "user", "content": user[0]}]
  assert ids == tok.apply_chat_template(conv)
  for k, answer in enumerate(answers):
    ids = ids + tok.encode(answer) + [framing.turn_end] + framing.feedback(tok, user[k + 1])
    conv = conv + [
      {"role": "assistant", "content": answer},
      {"role": "user", "content": user[k + 1]},
    ]
    assert ids == tok.apply_chat_template(conv), f"turn {k}"


def test_cut_off_turn_gets_an_end_token(tok):
  framing = ChatFraming.from_tokenizer(tok)
  fb = framing.feedback(tok, "again", ended_with_turn_end=False)
  assert fb[0] == framing.turn_end and fb[1:] == framing.feedback(tok, "again")


def test_template_without_turn_end_is_refused(tok):
  class NoEnd:
    eos_ids = (10**6,)

    def render_chat(self, messages, add_generation_prompt=True):
      return "".join(m["content"] for m in messages)

    def decode(self, ids):
      return "<never>"

  with pytest.raises(FramingError):
    ChatFraming.from_tokenizer(NoEnd())
