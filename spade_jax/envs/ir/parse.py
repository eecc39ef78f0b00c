"""The agent's answer from its token ids: last ``\\boxed{...}``, parsed on device.

Semantics (the Python reference `parse_boxed`, bytes regexes, ASCII classes only): take the
*last* non-overlapping match of ``\\boxed\\{([^{}]*)\\}``; its content must fully match
``ws* -?digits ws* (, ws* -?digits ws*)*``; every int must fit int32 and there may be at most
``max_items`` of them. Anything else -- no match, an invalid last match, an overflow, too many
items -- is "no answer" (a later invalid ``\\boxed{}`` overrides an earlier valid one, exactly
as ``findall(...)[-1]`` does).

The device parser is a streaming automaton fed one token at a time (`parse_feed`), so the
rollout can update it as each token is sampled and read the answer (`parse_result`) when the
turn ends, with no pass over the turn. Its state is a finite part -- progress through the
pattern ``\\boxed{``, whether we are inside a candidate's braces, a 5-state content DFA --
plus the ints being accumulated. Tokens are fed through a per-tokenizer table of *reduced*
byte classes (`make_parse_tables`): bytes are mapped to 13 classes (whitespace, other, the
pattern characters, braces, minus, comma, each digit) and provably equivalent runs are
collapsed (``ws``/``other`` runs, repeated non-digit classes beyond two, pattern letters that
cannot extend a match). SmolLM2's 49k tokens reduce to at most 7 classes, so one token is a
short unrolled loop.

Answer modes (`parse_modes`, `select_answer`, ``EnvProgram.answer_mode``). Besides that list
answer (grammar 0) the same single pass tracks, for four single-int *grammars* of the box
content -- the text between ``\\boxed{`` and the first following ``}`` --

  1 ``signed``     ``-?\\d+``        2 ``digits``     ``\\d+``
  3 ``signed_ws``  ``\\s*-?\\d+\\s*``  4 ``digits_ws``  ``\\s*\\d+\\s*``

the *first* and the *last* box whose content matches the grammar: exactly
``re.search(rb"\\\\boxed\\{(" + G + rb")\\}", text)`` (first) and ``re.findall(...)[-1]``
(last) on the UTF-8 bytes, ``int()`` of the group. A box that does not match is skipped, as
Python's search skips it (``\\boxed{\\boxed{12}}`` -> 12, ``\\boxed{-5}`` is no match for
``digits``, an unclosed ``\\boxed{5`` never matches). Matches of these grammars cannot overlap,
so findall's non-overlapping matches are all the matching boxes. Classes are ASCII: ``\\d`` is
``[0-9]``, ``\\s`` is ``[ \\t\\n\\r\\f\\v]`` (a translated environment that applies a ``str``
regex to non-ASCII digits or spaces differs). An int outside int32 still counts as the match
(the same box Python picks) and its value is *saturated* to ``[-2**31, 2**31 - 1]``: Python's
big int orders the same against any int32 target, so comparisons and range checks behave as in
Python except for equality with the two extreme values. Results are indexed
``alt_index(g, last) = 2 * (g - 1) + last`` in ``Action.alt_found`` / ``Action.alt_value`` [8].
The extra per-candidate state is one flag (whitespace seen); a closing brace derives the four
grammar matches from the content DFA (digits/after state, no comma, sign, whitespace) and
latches first/last values, a few [8]-vector selects per byte class (CPU, 256 x 256 SmolLM2
tokens: 38 -> 48 ms). The token reductions stay sound: a run containing an "other" byte kills
the content for every grammar, a whitespace run sets the flag once whatever its length, and a
repeated sign or comma already rules out a single int.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.envs.ir.program import Action, make_action

_WS_BYTES = b" \t\n\r\x0b\x0c"
_BOXED_B = re.compile(rb"\\boxed\{([^{}]*)\}")
_INTS_B = re.compile(
  rb"[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*(?:,[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*)*"
)
_INT_B = re.compile(rb"-?[0-9]+")
_WS_RE = rb"[ \t\n\r\f\v]*"
# Single-int answer grammars 1..4 (index 0 is the list grammar of `parse_boxed`).
GRAMMARS = (
  None,
  rb"-?[0-9]+",
  rb"[0-9]+",
  _WS_RE + rb"-?[0-9]+" + _WS_RE,
  _WS_RE + rb"[0-9]+" + _WS_RE,
)
GRAMMAR_NAMES = ("list", "signed", "digits", "signed_ws", "digits_ws")
N_ALT = 2 * (len(GRAMMARS) - 1)  # (grammar 1..4) x (first, last)
_GRAMMAR_B = [None] + [re.compile(rb"\\boxed\{(" + g + rb")\}") for g in GRAMMARS[1:]]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def alt_index(grammar: int, last: int) -> int:
  """Index of (single-int grammar 1..4, 0 first / 1 last) in ``Action.alt_found/alt_value``."""
  return 2 * (grammar - 1) + last


# Byte classes.
PAD, WS, OTHER, BSLASH, LB, RB, MINUS, COMMA = 0, 1, 2, 3, 9, 10, 11, 12
DIGIT0 = 16
_PATTERN = (BSLASH, 4, 5, 6, 7, 8, LB)  # \ b o x e d {
_CLASS_OF = {
  ord("\\"): BSLASH,
  ord("b"): 4,
  ord("o"): 5,
  ord("x"): 6,
  ord("e"): 7,
  ord("d"): 8,
  ord("{"): LB,
  ord("}"): RB,
  ord("-"): MINUS,
  ord(","): COMMA,
}
# Content DFA states.
S_START, S_SIGN, S_DIGITS, S_AFTER, S_DEAD = range(5)


def parse_boxed(text: bytes | str, max_items: int) -> list[int] | None:
  """Python reference: the ints of the last ``\\boxed{...}``, or None for "no answer"."""
  data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
  found = _BOXED_B.findall(data)
  if not found or not _INTS_B.fullmatch(found[-1]):
    return None
  vals = [int(v) for v in _INT_B.findall(found[-1])]
  if len(vals) > max_items or any(not -(2**31) <= v < 2**31 for v in vals):
    return None
  return vals


def parse_modes(text: bytes | str) -> list[int | None]:
  """Python reference of the single-int modes: ``[alt_index(g, last)] -> int or None`` (the
  value of ``re.search`` (first) / ``re.findall(...)[-1]`` (last) for grammar ``g``, saturated
  to int32)."""
  data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
  out: list[int | None] = [None] * N_ALT
  for g in range(1, len(GRAMMARS)):
    found = _GRAMMAR_B[g].findall(data)
    if found:
      m = _GRAMMAR_B[g].search(data)
      assert m is not None and m.group(1) == found[0]
      for last, v in ((0, found[0]), (1, found[-1])):
        out[alt_index(g, last)] = min(max(int(v), INT32_MIN), INT32_MAX)
  return out


def text_action(text: bytes | str, cfg) -> Action:
  """Host helper: the `Action` the device parser gives for ``text`` (every mode filled;
  ``cfg`` a `ProgramConfig`)."""
  act = make_action(parse_boxed(text, cfg.list_len), cfg)
  modes = parse_modes(text)
  return act._replace(
    alt_found=np.array([v is not None for v in modes]),
    alt_value=np.array([0 if v is None else v for v in modes], np.int32),
  )


def solution_modes(count, values) -> tuple[jnp.ndarray, jnp.ndarray]:
  """``alt_found, alt_value`` of the text ``\\boxed{v}`` for an answer of ``count`` ints (only
  a 1-int answer has them; the ``digits`` grammars need ``v >= 0``), as `make_action`."""
  v = jnp.asarray(values, jnp.int32)[0]
  one = jnp.asarray(count) == 1
  found = jnp.repeat(one & jnp.stack([True, v >= 0, True, v >= 0]), 2)
  return found, jnp.where(found, v, 0).astype(jnp.int32)


def select_answer(action: Action, answer_mode) -> Action:
  """The answer a program with ``answer_mode`` (grammar, 0 first / 1 last) sees: the action
  itself for grammar 0, else the selected single-int result as a 1-int answer (``found`` 0 and
  ``count`` 0 when absent; an action without ``alt_*`` fields has none)."""
  mode = jnp.asarray(answer_mode, jnp.int32)
  values = jnp.asarray(action.values, jnp.int32)
  if action.alt_found is None:
    alt_f, alt_v = jnp.bool_(False), jnp.int32(0)
  else:
    k = jnp.clip(2 * (mode[0] - 1) + jnp.clip(mode[1], 0, 1), 0, N_ALT - 1)
    alt_f = jnp.asarray(action.alt_found, bool)[k]
    alt_v = jnp.asarray(action.alt_value, jnp.int32)[k]
  use = mode[0] != 0
  return Action(
    jnp.where(use, alt_f, jnp.asarray(action.found, bool)),
    jnp.where(use, alt_f.astype(jnp.int32), jnp.asarray(action.count, jnp.int32)),
    jnp.where(use, jnp.zeros_like(values).at[0].set(jnp.where(alt_f, alt_v, 0)), values),
    action.alt_found,
    action.alt_value,
  )


# --------------------------------------------------------------------------- byte tables
def _byte_class(b: int) -> int:
  if b in _WS_BYTES:
    return WS
  if 48 <= b <= 57:
    return DIGIT0 + b - 48
  return _CLASS_OF.get(b, OTHER)


def reduce_token(data: bytes) -> list[int]:
  """A token's bytes -> an equivalent (for the automaton) short class sequence."""
  out: list[int] = []
  for i, b in enumerate(data):
    c = _byte_class(b)
    if 4 <= c <= 8 and i >= 6:  # a pattern letter can only matter right after "\box..."
      j = data.rfind(b"\\", 0, i)
      if j < 0 or not b"\\boxed{".startswith(data[j : i + 1]):
        c = OTHER
    if c in (WS, OTHER) and out and out[-1] in (WS, OTHER):
      out[-1] = max(out[-1], c)  # ws+ws = ws; any run with an "other" acts as one "other"
      continue
    if c < DIGIT0 and len(out) >= 2 and out[-1] == c and out[-2] == c:
      continue  # c c c acts like c c for every non-digit class
    out.append(c)
  return out


class ParseTables(NamedTuple):
  classes: jnp.ndarray  # [V, W] int32 reduced byte classes per token (PAD-filled)


def make_parse_tables(token_bytes: list[bytes]) -> ParseTables:
  """Per-tokenizer table for the device parser (pass ``tokenizer.token_bytes``)."""
  reduced = [reduce_token(b) for b in token_bytes]
  width = max(1, max(len(r) for r in reduced))
  arr = np.zeros((len(reduced), width), np.int32)
  for i, r in enumerate(reduced):
    arr[i, : len(r)] = r
  return ParseTables(arr)


# ------------------------------------------------------------------------------ automaton
class ParseState(NamedTuple):
  pm: jnp.ndarray  # [] progress through "\boxed{" (0..6)
  inside: jnp.ndarray  # [] bool: inside a candidate's braces
  cs: jnp.ndarray  # [] content DFA state
  neg: jnp.ndarray  # [] bool: current int is negative
  mag: jnp.ndarray  # [] uint32 magnitude of the current int
  bad: jnp.ndarray  # [] bool: overflow / too many ints in this candidate
  count: jnp.ndarray  # [] ints closed in this candidate
  items: jnp.ndarray  # [max_items] int32
  found: jnp.ndarray  # [] bool: result of the last completed candidate
  res_count: jnp.ndarray
  res_items: jnp.ndarray  # [max_items]
  ws: jnp.ndarray  # [] bool: whitespace seen in this candidate
  alt_found: jnp.ndarray  # [N_ALT] bool: (grammar, first/last) matched so far
  alt_value: jnp.ndarray  # [N_ALT] int32


def parse_init(max_items: int) -> ParseState:
  z = jnp.int32(0)
  f = jnp.bool_(False)
  zi = jnp.zeros(max_items, jnp.int32)
  alt_f, alt_v = jnp.zeros(N_ALT, bool), jnp.zeros(N_ALT, jnp.int32)
  return ParseState(z, f, z, f, jnp.uint32(0), f, z, zi, f, z, zi, f, alt_f, alt_v)


# Which alt results a box satisfying the content DFA as one int matches, by (ws seen, negative):
# grammars 1 -?d+, 2 d+, 3 s*-?d+s*, 4 s*d+s* each twice (first, last). A table lookup is ~3x
# cheaper per byte class on CPU than building the mask from the flags.
_ALT_OK = np.array(
  [[not ws, not (ws or neg), True, not neg] for ws in (0, 1) for neg in (0, 1)], bool
).repeat(2, axis=1)
_ALT_IS_LAST = np.arange(N_ALT) % 2 == 1


def _latch(st: ParseState, commit) -> tuple[jnp.ndarray, jnp.ndarray]:
  """``alt_found/alt_value`` after a closing brace (``commit``) of the current candidate."""
  single = commit & ((st.cs == S_DIGITS) | (st.cs == S_AFTER)) & (st.count == 0)
  ok = single & jnp.asarray(_ALT_OK)[st.ws.astype(jnp.int32) * 2 + st.neg.astype(jnp.int32)]
  ovf = st.bad | (~st.neg & (st.mag > jnp.uint32(INT32_MAX)))
  signed = jax.lax.bitcast_convert_type(
    jnp.where(st.neg, jnp.uint32(0) - st.mag, st.mag), jnp.int32
  )
  val = jnp.where(ovf, jnp.where(st.neg, INT32_MIN, INT32_MAX), signed).astype(jnp.int32)
  take = ok & (_ALT_IS_LAST | ~st.alt_found)
  return st.alt_found | ok, jnp.where(take, val, st.alt_value)


def _push(st: ParseState) -> ParseState:
  """Closes the current int into ``items``."""
  max_items = st.items.shape[0]
  ovf = ~st.neg & (st.mag > jnp.uint32(2**31 - 1))
  val = jax.lax.bitcast_convert_type(jnp.where(st.neg, jnp.uint32(0) - st.mag, st.mag), jnp.int32)
  items = st.items.at[jnp.minimum(st.count, max_items - 1)].set(
    jnp.where(st.count < max_items, val, st.items[max_items - 1])
  )
  return st._replace(
    items=items,
    count=st.count + 1,
    bad=st.bad | ovf | (st.count >= max_items),
    neg=jnp.bool_(False),
    mag=jnp.uint32(0),
  )


def _feed_class(st: ParseState, c) -> ParseState:
  """One byte class through the automaton (PAD leaves the state unchanged)."""
  is_digit = c >= DIGIT0
  d = (c - DIGIT0).astype(jnp.uint32)
  opened = (st.pm == 6) & (c == LB)
  pm = jnp.where(
    ~opened & (c == jnp.asarray(_PATTERN)[st.pm]), st.pm + 1, jnp.where(c == BSLASH, 1, 0)
  )
  # Content DFA (only meaningful while inside braces).
  closes = (c == COMMA) & ((st.cs == S_DIGITS) | (st.cs == S_AFTER))
  pushed = _push(st)
  base = jax.tree.map(lambda a, b: jnp.where(closes, a, b), pushed, st)
  big = st.mag > 214748364
  ovf = is_digit & (st.cs == S_DIGITS) & (big | ((st.mag == 214748364) & (d > 8)))
  mag = jnp.where(
    is_digit & (st.cs != S_DIGITS),
    d,
    jnp.where(is_digit & (st.cs == S_DIGITS) & ~ovf, st.mag * 10 + d, base.mag),
  )
  cs = jnp.select(
    [st.cs == S_START, st.cs == S_SIGN, st.cs == S_DIGITS, st.cs == S_AFTER],
    [
      jnp.where(
        c == WS, S_START, jnp.where(c == MINUS, S_SIGN, jnp.where(is_digit, S_DIGITS, S_DEAD))
      ),
      jnp.where(is_digit, S_DIGITS, S_DEAD),
      jnp.where(
        is_digit, S_DIGITS, jnp.where(c == WS, S_AFTER, jnp.where(c == COMMA, S_START, S_DEAD))
      ),
      jnp.where(c == WS, S_AFTER, jnp.where(c == COMMA, S_START, S_DEAD)),
    ],
    S_DEAD,
  )
  content = base._replace(
    cs=cs,
    mag=mag,
    bad=base.bad | ovf,
    neg=jnp.where((st.cs == S_START) & (c == MINUS), True, base.neg),
  )
  # Closing brace: close the last int and commit this candidate as the latest answer.
  accept = (st.cs == S_DIGITS) | (st.cs == S_AFTER)
  fin = jax.tree.map(lambda a, b: jnp.where(accept, a, b), _push(st), st)
  commit = st.inside & (c == RB)
  alt_found, alt_value = _latch(st, commit)
  content = content._replace(ws=st.ws | (c == WS))
  out = jax.tree.map(lambda a, b: jnp.where(st.inside & (c != LB) & (c != RB), a, b), content, st)
  out = out._replace(
    alt_found=alt_found,
    alt_value=alt_value,
    found=jnp.where(commit, accept & ~fin.bad, st.found),
    res_count=jnp.where(commit, fin.count, st.res_count),
    res_items=jnp.where(commit, fin.items, st.res_items),
    inside=jnp.where(c == LB, opened, jnp.where(c == RB, False, st.inside)),
    pm=pm,
  )
  fresh = parse_init(st.items.shape[0])
  out = out._replace(
    cs=jnp.where(opened, S_START, out.cs),
    neg=out.neg & ~opened,
    mag=jnp.where(opened, jnp.uint32(0), out.mag),
    bad=out.bad & ~opened,
    ws=out.ws & ~opened,
    count=jnp.where(opened, 0, out.count),
    items=jnp.where(opened, fresh.items, out.items),
  )
  return jax.tree.map(lambda a, b: jnp.where(c == PAD, b, a), out, st)


def parse_feed(st: ParseState, token, tables: ParseTables) -> ParseState:
  """Feeds one token id (scalar; `vmap` for a batch)."""
  classes = jnp.asarray(tables.classes)[token]
  for w in range(classes.shape[0]):  # a few classes per token: unrolled
    st = _feed_class(st, classes[w])
  return st


def parse_result(st: ParseState) -> Action:
  """The answer so far: `Action(found, count, values, alt_found, alt_value)` (values
  zero-padded; ``alt_*`` the single-int modes, see `alt_index`)."""
  found = st.found
  return Action(
    found,
    jnp.where(found, st.res_count, 0),
    jnp.where(found, st.res_items, jnp.zeros_like(st.res_items)),
    st.alt_found,
    jnp.where(st.alt_found, st.alt_value, 0),
  )


def parse_tokens(ids, length, tables: ParseTables, max_items: int) -> Action:
  """Parses ``ids[:length]`` (one sequence; `vmap` for a batch)."""

  def body(st, x):
    tok, live = x
    new = parse_feed(st, tok, tables)
    return jax.tree.map(lambda a, b: jnp.where(live, a, b), new, st), None

  live = jnp.arange(ids.shape[0]) < length
  st, _ = jax.lax.scan(body, parse_init(max_items), (ids, live))
  return parse_result(st)
