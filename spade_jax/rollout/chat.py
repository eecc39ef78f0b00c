"""Chat framing of multi-turn episodes as token ids (token-in, token-out).

An episode is ``[first user message] -> assistant turn -> feedback user message -> assistant
turn -> ...``. The conversation is never re-rendered: the first prompt is the chat template of
the first user message with the generation prompt, and every later turn appends exactly the
template's *delta* for "assistant turn ended, user says X, assistant starts", computed once per
tokenizer by rendering marker conversations. The deltas are verified at construction: for
sample contents, ``prefix + encode(content) + suffix`` must equal the template's own
tokenisation of the same conversation, so a tokenizer whose template cannot be framed this way
is refused rather than silently drifting.
"""

from __future__ import annotations

import dataclasses

from spade_jax.tokenizer import Tokenizer

_MARK = "\x00SPADE-CONTENT\x00"
_PROBES = ("Your guess 42 is too high. Try again.", "7", "A\n\nB: -3, 4, 5 \\boxed{x}", "ünï 🎲")


class FramingError(ValueError):
  pass


def _split(text: str, where: str) -> tuple[str, str]:
  if text.count(_MARK) != 1:
    raise FramingError(f"chat template renders the {where} content {text.count(_MARK)} times")
  a, b = text.split(_MARK)
  return a, b


@dataclasses.dataclass(frozen=True)
class ChatFraming:
  """Token-level framing of the first prompt and of each feedback turn.

  ``first_prefix + encode(content) + first_suffix`` is the first prompt (ending with the
  assistant generation prompt). After an assistant turn that ended with ``turn_end`` (the
  end-of-turn token the model sampled), ``turn_prefix + encode(feedback) + turn_suffix`` are
  the forced tokens that lead into the next assistant turn.
  """

  first_prefix: tuple[int, ...]
  first_suffix: tuple[int, ...]
  turn_prefix: tuple[int, ...]
  turn_suffix: tuple[int, ...]
  turn_end: int
  system: str | None = None

  @classmethod
  def from_tokenizer(cls, tok: Tokenizer, system: str | None = None) -> ChatFraming:
    sys_msgs = [{"role": "system", "content": system}] if system is not None else []
    first = tok.render_chat(sys_msgs + [{"role": "user", "content": _MARK}])
    fp, fs = _split(first, "first-turn")
    # conversation with one finished assistant turn, then a feedback message
    base = sys_msgs + [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    before = tok.render_chat(base, add_generation_prompt=False)
    after = tok.render_chat(base + [{"role": "user", "content": _MARK}])
    if not after.startswith(before[: len(before) - 1]):
      raise FramingError("chat template re-renders earlier turns when a turn is appended")
    turn_end = _turn_end_token(tok, before)
    end_text = tok.decode([turn_end])
    cut = before.rfind("A" + end_text)
    if cut < 0:
      raise FramingError("cannot find the end-of-turn token after the assistant content")
    delta = after[cut + 1 + len(end_text) :]
    tp, ts = _split(delta, "feedback")
    enc = tok.encode
    framing = cls(tuple(enc(fp)), tuple(enc(fs)), tuple(enc(tp)), tuple(enc(ts)), turn_end, system)
    framing._verify(tok, sys_msgs)
    return framing

  def first_prompt(self, tok: Tokenizer, content: str) -> list[int]:
    return [*self.first_prefix, *tok.encode(content), *self.first_suffix]

  def feedback(
    self, tok: Tokenizer, content: str, *, ended_with_turn_end: bool = True
  ) -> list[int]:
    """Forced tokens after an assistant turn (prepends the end-of-turn token if the turn was
    cut off by its token budget, so the conversation stays well-formed)."""
    head = [] if ended_with_turn_end else [self.turn_end]
    return [*head, *self.turn_prefix, *tok.encode(content), *self.turn_suffix]

  # -- the interface `rollout.host.play` uses (shared with `rollout.tool_chat.ToolChatFraming`;
  # games carry nothing in `info` that the framing needs) --------------------------------------

  def open(self, tok: Tokenizer, content: str, info: dict | None = None) -> list[int]:
    """The first prompt of an episode whose first user message is ``content``."""
    return self.first_prompt(tok, content)

  def turn(
    self, tok: Tokenizer, obs: str, info: dict | None = None, *, ended_with_turn_end: bool = True
  ) -> tuple[list[int], list[dict[str, str]]]:
    """Forced tokens of the feedback ``obs`` and its transcript message (a ``user`` message)."""
    tokens = self.feedback(tok, obs, ended_with_turn_end=ended_with_turn_end)
    return tokens, [{"role": "user", "content": obs}]

  def _verify(self, tok: Tokenizer, sys_msgs: list[dict]) -> None:
    for probe in _PROBES:
      want = tok.apply_chat_template(sys_msgs + [{"role": "user", "content": probe}])
      if self.first_prompt(tok, probe) != want:
        raise FramingError(f"first-turn framing differs from the chat template for {probe!r}")
      answer = "I think \\boxed{3}"
      conv = sys_msgs + [
        {"role": "user", "content": probe},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": probe},
      ]
      want = tok.apply_chat_template(conv)
      got = (
        self.first_prompt(tok, probe)
        + tok.encode(answer)
        + [self.turn_end]
        + self.feedback(tok, probe)
      )
      if got != want:
        raise FramingError(f"feedback framing differs from the chat template for {probe!r}")


def _turn_end_token(tok: Tokenizer, rendered: str) -> int:
  """The end-of-turn token the template writes after an assistant message."""
  for eos in tok.eos_ids:
    if rendered.rfind(tok.decode([eos])) > rendered.rfind("A"):
      return int(eos)
  raise FramingError("the chat template closes assistant turns with no known end-of-turn token")
