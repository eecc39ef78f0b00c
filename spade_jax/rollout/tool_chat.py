"""Chat framing of multi-turn tool-use episodes as token ids (token-in, token-out).

A tool episode is ``[system + tools] [first user message] -> assistant turn -> feedback ->
assistant turn -> ...``, where the feedback after a turn is what `ToolEnv.step` reports: one
``tool`` message per executed call (``info["tool_results"]``), followed by a ``user`` message
when a new instruction was revealed (``info["user_message"]``); a step without tool results (a
format error, a wrong answer) feeds its observation text back as a ``user`` message, like games.

Templates with native tool support (Qwen3: tool specs in a ``<tools>`` system block, calls as
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, consecutive tool results grouped in
one user turn of ``<tool_response>`` blocks) get the tools through ``apply_chat_template(...,
tools=...)`` and the results as ``tool``-role messages. Support is detected by rendering a probe
conversation with a tool spec and a ``tool`` message: both must show up in the text. Templates
without it (SmolLM2's, plain ChatML) use the documented fallback, the same conversation in
Qwen's words: the system message gains the ``# Tools`` text with the ``<tools>`` JSON block and
the ``<tool_call>`` instruction (`tools_system_text`), and each run of tool results becomes one
``user`` message of ``<tool_response>\\n...\\n</tool_response>`` blocks joined by newlines.

As in `rollout.chat`, the conversation is never re-rendered. The first prompt is the template's
tokenisation of system + first user message with the episode's tools; every feedback appends
the template's own *delta* for "assistant turn ended, these messages follow, assistant starts",
taken from a marker conversation of the same message roles (once per role sequence, cached;
all that a `ToolEnv` step can produce are built at construction). The framing must equal the
template's tokenisation of the whole conversation; this is verified at construction for every
such role sequence and on multi-turn probe conversations (tool calls in the assistant text, one
and several tool results, a revealed instruction, plain feedback), so a template that cannot
be framed this way is refused with a `FramingError`.

Assistant turns are kept as sampled. Qwen3's template drops ``<think>`` blocks of assistant
turns before the last real user query when it re-renders a history; the framing deliberately
does not (the policy is trained on the tokens it saw), and the probes hold no thinking.
"""

from __future__ import annotations

import dataclasses
import json

from spade_jax.envs.sandbox.tool_env import MAX_CALLS_PER_TURN
from spade_jax.rollout.chat import FramingError
from spade_jax.tokenizer import Tokenizer

TOOLS_HEADER = (
  "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
  "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
  "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
  '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

_ANSWER = "\x00SPADE-ANSWER\x00"
_PROBE_TOOLS = [
  {
    "type": "function",
    "function": {
      "name": "spade_probe_lookup",
      "description": "Looks a key up.",
      "parameters": {
        "type": "object",
        "properties": {"key": {"type": "string", "description": "the key"}},
        "required": ["key"],
      },
    },
  }
]
_PROBE_CALL = (
  '<tool_call>\n{"name": "spade_probe_lookup", "arguments": {"key": "a b"}}\n</tool_call>'
)
_PROBE_ANSWERS = (
  _PROBE_CALL,
  "Let me look both up.\n" + _PROBE_CALL + "\n" + _PROBE_CALL.replace("a b", "ünï"),
  "<answer>42</answer>",
)


def _tool(content: str, name: str = "spade_probe_lookup") -> dict[str, str]:
  return {"role": "tool", "name": name, "content": content}


def _user(content: str) -> dict[str, str]:
  return {"role": "user", "content": content}


_PROBE_FEEDBACK = (
  [_tool('{"value": 7}')],
  [_tool("A\n\nB: -3, 4, 5"), _tool("Error: unknown tool 'x' (available: y)"), _user("Now do Z.")],
  [_user("Incorrect answer: '41'.")],
  [_tool("ünï 🎲 \\boxed{x}")],
)


def _marker(j: int) -> str:
  return f"\x00SPADE-CONTENT-{j}\x00"


def tools_system_text(system: str | None, tools: list[dict]) -> str | None:
  """The fallback's system message: ``system`` then Qwen's tool block (None: no system)."""
  if not tools:
    return system
  lines = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
  head = system + "\n\n" if system is not None else ""
  return head + TOOLS_HEADER + lines + TOOLS_FOOTER


def tool_response_text(contents: list[str]) -> str:
  """The fallback's user message for a run of tool results."""
  return "\n".join(f"<tool_response>\n{c}\n</tool_response>" for c in contents)


def feedback_messages(obs: str, info: dict | None) -> list[dict[str, str]]:
  """The messages that follow an assistant turn, from a step's observation and info (which
  may come from a sandbox: anything malformed is shown as text, never raised)."""
  info = info if isinstance(info, dict) else {}
  results = info.get("tool_results")
  if not isinstance(results, list) or not results:
    return [_user(str(obs))]
  msgs = [
    _tool(str(r.get("content", "")), str(r.get("name") or ""))
    if isinstance(r, dict)
    else _tool(str(r), "")
    for r in results
  ]
  if info.get("user_message") is not None:
    msgs.append(_user(str(info["user_message"])))
  return msgs


@dataclasses.dataclass(frozen=True)
class ToolChatFraming:
  """Token-level framing of tool-use episodes (module docstring).

  ``open(tok, content, info)`` is the first prompt (``info["tools"]``: the episode's function
  specs); ``turn(tok, obs, info, ended_with_turn_end=...)`` the forced tokens after an assistant
  turn and the transcript messages they stand for. ``native``: the template renders tools and
  ``tool`` messages itself (else the fallback). ``turn_end``: the end-of-turn token the template
  writes after an assistant message.
  """

  turn_end: int
  native: bool
  system: str | None = None
  _deltas: dict = dataclasses.field(default_factory=dict, repr=False, compare=False, hash=False)

  @classmethod
  def from_tokenizer(cls, tok: Tokenizer, system: str | None = None) -> ToolChatFraming:
    native = _supports_tools(tok)
    framing = cls(_turn_end_token(tok, cls(0, native, system)), native, system)
    framing._verify(tok)
    return framing

  # -- the interface `rollout.host.play` uses ------------------------------------------------

  def open(self, tok: Tokenizer, content: str, info: dict | None = None) -> list[int]:
    """System (with the episode's tools) + the first user message + the generation prompt."""
    tools = info.get("tools") if isinstance(info, dict) else None
    tools = list(tools) if isinstance(tools, list) else []
    return self._ids(tok, self._head(tools) + [_user(content)], tools)

  def turn(
    self, tok: Tokenizer, obs: str, info: dict | None = None, *, ended_with_turn_end: bool = True
  ) -> tuple[list[int], list[dict[str, str]]]:
    """Forced tokens after an assistant turn (led by the end-of-turn token if the turn was cut
    off by its token budget) and the transcript messages of this feedback."""
    msgs = feedback_messages(obs, info)
    return self.feedback(tok, msgs, ended_with_turn_end=ended_with_turn_end), msgs

  def feedback(
    self, tok: Tokenizer, msgs: list[dict[str, str]], *, ended_with_turn_end: bool = True
  ) -> list[int]:
    """Forced tokens for the feedback messages ``msgs`` (``tool`` and ``user`` roles)."""
    pieces = self._delta(tok, tuple(m["role"] for m in msgs))
    text = pieces[0] + "".join(m["content"] + p for m, p in zip(msgs, pieces[1:]))
    head = [] if ended_with_turn_end else [self.turn_end]
    return head + tok.encode(text)

  def render_ids(self, tok: Tokenizer, conv: list[dict], tools: list[dict]) -> list[int]:
    """The template's tokenisation of a whole conversation (``conv`` without the system
    message; ``tool`` messages as the framing feeds them), ending with the generation prompt:
    what the framed token stream must equal."""
    return self._ids(tok, self._head(tools) + list(conv), tools)

  # -- the template --------------------------------------------------------------------------

  def _head(self, tools: list[dict]) -> list[dict[str, str]]:
    if self.native:
      return [] if self.system is None else [{"role": "system", "content": self.system}]
    text = tools_system_text(self.system, tools)
    return [] if text is None else [{"role": "system", "content": text}]

  def _template_messages(self, msgs: list[dict]) -> list[dict]:
    """``msgs`` as the template sees them: unchanged when native, else each run of ``tool``
    messages as one ``user`` message of ``<tool_response>`` blocks."""
    if self.native:
      return list(msgs)
    out, run = [], []
    for m in [*msgs, None]:
      if m is not None and m["role"] == "tool":
        run.append(m["content"])
        continue
      if run:
        out.append(_user(tool_response_text(run)))
        run = []
      if m is not None:
        out.append(m)
    return out

  def _render(self, tok: Tokenizer, msgs: list[dict], tools: list[dict], **kw) -> str:
    kwargs = {"tools": tools} if self.native and tools else {}
    return tok.render_chat(self._template_messages(msgs), **kwargs, **kw)

  def _ids(self, tok: Tokenizer, msgs: list[dict], tools: list[dict]) -> list[int]:
    kwargs = {"tools": tools} if self.native and tools else {}
    return tok.apply_chat_template(self._template_messages(msgs), **kwargs)

  def _delta(self, tok: Tokenizer, roles: tuple[str, ...]) -> tuple[str, ...]:
    """Text pieces around the feedback contents for this role sequence: ``pieces[0] + c_0 +
    pieces[1] + ... + c_k-1 + pieces[k]`` follows the end-of-turn token (cached; verified on
    first use)."""
    if roles in self._deltas:
      return self._deltas[roles]
    if not roles or any(r not in ("tool", "user") for r in roles):
      raise FramingError(f"feedback must be tool/user messages, got roles {roles}")
    marked = [{"role": r, "content": _marker(j)} for j, r in enumerate(roles)]
    head = self._head(_PROBE_TOOLS) + [_user("Q"), {"role": "assistant", "content": _ANSWER}]
    text = self._render(tok, head + marked, _PROBE_TOOLS)
    end = _ANSWER + tok.decode([self.turn_end])
    if text.count(end) != 1:
      raise FramingError("chat template does not close the assistant turn with its end token")
    rest, pieces = text.split(end, 1)[1], []
    for j in range(len(roles)):
      if rest.count(_marker(j)) != 1:
        raise FramingError(
          f"chat template renders feedback content {j} of roles {roles} {rest.count(_marker(j))} "
          "times"
        )
      piece, rest = rest.split(_marker(j))
      pieces.append(piece)
    pieces.append(rest)
    self._deltas[roles] = tuple(pieces)
    probe = [
      _tool(f"probe {j}") if r == "tool" else _user(f"probe {j}") for j, r in enumerate(roles)
    ]
    self._check(tok, _PROBE_ANSWERS[0], probe)
    return self._deltas[roles]

  def _check(self, tok: Tokenizer, answer: str, feedback: list[dict]) -> None:
    """One turn: framed tokens must equal the template's tokenisation of the conversation."""
    conv = [_user("Use the tools."), {"role": "assistant", "content": answer}, *feedback]
    got = self.open(tok, "Use the tools.", {"tools": _PROBE_TOOLS})
    got = got + tok.encode(answer) + [self.turn_end] + self.feedback(tok, feedback)
    if got != self.render_ids(tok, conv, _PROBE_TOOLS):
      roles = [m["role"] for m in feedback]
      self._deltas.pop(tuple(roles), None)
      raise FramingError(
        f"tool feedback framing (roles {roles}) differs from the chat template's tokenisation "
        "of the whole conversation; this template cannot be framed token-in/token-out"
      )

  def _verify(self, tok: Tokenizer) -> None:
    """Every feedback shape a `ToolEnv` step can produce (plain feedback; 1 to
    ``MAX_CALLS_PER_TURN + 1`` tool results, with or without a revealed instruction), then
    multi-turn probes: every prefix of the framed stream equals the template's tokens."""
    self._delta(tok, ("user",))
    for k in range(1, MAX_CALLS_PER_TURN + 2):
      self._delta(tok, ("tool",) * k)
      self._delta(tok, ("tool",) * k + ("user",))
    for tools in (_PROBE_TOOLS, []):
      first = "Use the tools to find the value of a b. Answer as <answer>...</answer>."
      ids, conv = self.open(tok, first, {"tools": tools}), [_user(first)]
      if ids != self.render_ids(tok, conv, tools):
        raise FramingError("first-prompt framing differs from the chat template")
      for k, fb in enumerate(_PROBE_FEEDBACK):
        answer = _PROBE_ANSWERS[k % len(_PROBE_ANSWERS)]
        ids = ids + tok.encode(answer) + [self.turn_end] + self.feedback(tok, fb)
        conv = conv + [{"role": "assistant", "content": answer}, *fb]
        if ids != self.render_ids(tok, conv, tools):
          raise FramingError(
            f"tool feedback framing differs from the chat template at probe turn {k} "
            f"(roles {[m['role'] for m in fb]}); this template cannot be framed token-in/"
            "token-out"
          )


def _supports_tools(tok: Tokenizer) -> bool:
  """Whether the template renders ``tools=`` specs and ``tool``-role messages itself."""
  msgs = [_user("Q"), {"role": "assistant", "content": "A"}, _tool(_marker(0))]
  try:
    text = tok.render_chat(msgs, tools=_PROBE_TOOLS)
  except Exception:  # noqa: BLE001 - a template that rejects tools or tool roles: the fallback
    return False
  return "spade_probe_lookup" in text and _marker(0) in text


def _turn_end_token(tok: Tokenizer, framing: ToolChatFraming) -> int:
  """The end-of-turn token the template writes right after an assistant message's content."""
  head = framing._head(_PROBE_TOOLS) + [_user("Q"), {"role": "assistant", "content": _ANSWER}]
  text = framing._render(tok, head + [_user("R")], _PROBE_TOOLS)
  at = text.find(_ANSWER)
  if at < 0:
    raise FramingError("chat template does not render the assistant content")
  for eos in tok.eos_ids:
    if text.startswith(tok.decode([eos]), at + len(_ANSWER)):
      return int(eos)
  raise FramingError("the chat template closes assistant turns with no known end-of-turn token")
