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
byte classes (`make_parse_tables`): bytes are mapped to byte classes (whitespace, other, the
pattern characters, braces, minus, plus, comma, each digit) and provably equivalent runs are
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
``alt_index(g, last) = 2 * (g - 1) + last`` in ``Action.alt_found`` / ``alt_value`` /
``alt_valid`` [N_ALT = 10] (grammars 1..5).
The extra per-candidate state is one flag (whitespace seen); a closing brace derives the four
grammar matches from the content DFA (digits/after state, no comma, sign, whitespace) and
latches first/last values, a few [8]-vector selects per byte class. The token reductions stay sound: a run containing an "other" byte kills
the content for every grammar, a whitespace run sets the flag once whatever its length, and a
repeated sign or comma already rules out a single int.

Grammar 5 ``box`` is what ``m = re.search(r"\\\\boxed\\{([^}]*)\\}", text)`` (first) /
``re.findall(...)[-1]`` (last) followed by ``int(m.group(1).strip())`` in a try/except
computes: the content is *anything* up to the first following ``}`` (it may hold ``{`` and
further ``\\boxed{``, which are then content, as in Python's leftmost non-overlapping
matches; an unclosed box never matches). Three results per (box, first/last):
``alt_found`` = the regex matched; ``alt_valid`` = the content, stripped of ASCII whitespace
``[ \\t\\n\\r\\f\\v]``, fully matches ``[+-]?[0-9]+`` (``int()`` on ASCII text, except that
``int()`` also accepts ``_`` between digits and strips ``\\x1c``-``\\x1f``, non-ASCII spaces and
digits: such contents read invalid here); ``alt_value`` = that int, saturated to int32, when
valid, else 0. For grammars 1..4 ``alt_valid == alt_found``. The Python reference
`parse_modes` gives `BOX_INVALID` for a box whose content is no int. Device state: whether we
are inside a box-5 candidate and whether its content held a ``{`` (else it is exactly the
current list candidate, whose content DFA then decides validity and value), plus a ``+`` flag
(``+`` is byte class `PLUS`: a sign for ``box`` only, "other" for grammars 0..4), and the
validity of the first / last box match ([2]; ``alt_valid`` is assembled in `parse_result`,
not kept per grammar in the state, which is what each fed token pays for).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.envs.ir.program import N_ALT, Action, make_action

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
# Grammar 5 ``box``: content ``[^}]*``, valid when it strips to ``[+-]?[0-9]+`` (see above).
BOX = 5
BOX_CONTENT = rb"[^}]*"
BOX_INVALID = "not-an-int"  # `parse_modes`: a box whose content int() rejects
GRAMMAR_NAMES = ("list", "signed", "digits", "signed_ws", "digits_ws", "box")
assert N_ALT == 2 * (len(GRAMMAR_NAMES) - 1)  # (grammar 1..5) x (first, last)
_GRAMMAR_B = [None] + [re.compile(rb"\\boxed\{(" + g + rb")\}") for g in GRAMMARS[1:]]
_GRAMMAR_B.append(re.compile(rb"\\boxed\{(" + BOX_CONTENT + rb")\}"))
_BOX_INT_B = re.compile(rb"[+-]?[0-9]+")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def alt_index(grammar: int, last: int) -> int:
  """Index of (grammar 1..5, 0 first / 1 last) in ``Action.alt_found/alt_value/alt_valid``."""
  return 2 * (grammar - 1) + last


# Byte classes.
PAD, WS, OTHER, BSLASH, LB, RB, MINUS, COMMA, PLUS = 0, 1, 2, 3, 9, 10, 11, 12, 13
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
  ord("+"): PLUS,
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


def _box_int(content: bytes) -> int | str:
  body = content.strip(_WS_BYTES)
  return int(body) if _BOX_INT_B.fullmatch(body) else BOX_INVALID


def parse_modes(text: bytes | str) -> list[int | str | None]:
  """Python reference of the single-int modes: ``[alt_index(g, last)] -> int or None`` (the
  value of ``re.search`` (first) / ``re.findall(...)[-1]`` (last) for grammar ``g``, saturated
  to int32); for ``box`` a match whose content is no int gives `BOX_INVALID`."""
  data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
  out: list[int | str | None] = [None] * N_ALT
  for g in range(1, len(GRAMMAR_NAMES)):
    found = _GRAMMAR_B[g].findall(data)
    if found:
      m = _GRAMMAR_B[g].search(data)
      assert m is not None and m.group(1) == found[0]
      for last, v in ((0, found[0]), (1, found[-1])):
        v = _box_int(v) if g == BOX else int(v)
        out[alt_index(g, last)] = v if v == BOX_INVALID else min(max(v, INT32_MIN), INT32_MAX)
  return out


def text_action(text: bytes | str, cfg) -> Action:
  """Host helper: the `Action` the device parser gives for ``text`` (every mode filled;
  ``cfg`` a `ProgramConfig`)."""
  act = make_action(parse_boxed(text, cfg.list_len), cfg)
  modes = parse_modes(text)
  valid = [isinstance(v, int) for v in modes]
  return act._replace(
    alt_found=np.array([v is not None for v in modes]),
    alt_value=np.array([v if ok else 0 for v, ok in zip(modes, valid)], np.int32),
    alt_valid=np.array(valid),
  )


def solution_modes(count, values) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
  """``alt_found, alt_value, alt_valid`` of the text ``\\boxed{v}`` for an answer of ``count``
  ints (only a 1-int answer has grammars 1..4, the ``digits`` ones need ``v >= 0``; ``box`` is
  found for any count, valid for one int), as `make_action`."""
  v = jnp.asarray(values, jnp.int32)[0]
  one = jnp.asarray(count) == 1
  valid = jnp.repeat(one & jnp.stack([True, v >= 0, True, v >= 0, True]), 2)
  found = valid | (jnp.arange(N_ALT) >= alt_index(BOX, 0))
  return found, jnp.where(valid, v, 0).astype(jnp.int32), valid


def select_answer(action: Action, answer_mode) -> Action:
  """The answer a program with ``answer_mode`` (grammar, 0 first / 1 last) sees: the action
  itself for grammar 0, else the selected single-int result as a 1-int answer: ``found`` the
  match (for ``box``: a box exists), ``count`` 1 when its int is valid, else 0 (an action
  without ``alt_*`` fields has none; one without ``alt_valid`` has valid = found)."""
  mode = jnp.asarray(answer_mode, jnp.int32)
  values = jnp.asarray(action.values, jnp.int32)
  if action.alt_found is None:
    alt_f, alt_ok, alt_v = jnp.bool_(False), jnp.bool_(False), jnp.int32(0)
  else:
    k = jnp.clip(2 * (mode[0] - 1) + jnp.clip(mode[1], 0, 1), 0, N_ALT - 1)
    alt_f = jnp.asarray(action.alt_found, bool)[k]
    alt_ok = alt_f if action.alt_valid is None else jnp.asarray(action.alt_valid, bool)[k]
    alt_v = jnp.asarray(action.alt_value, jnp.int32)[k]
  use = mode[0] != 0
  return Action(
    jnp.where(use, alt_f, jnp.asarray(action.found, bool)),
    jnp.where(use, alt_ok.astype(jnp.int32), jnp.asarray(action.count, jnp.int32)),
    jnp.where(use, jnp.zeros_like(values).at[0].set(jnp.where(alt_ok, alt_v, 0)), values),
    action.alt_found,
    action.alt_value,
    action.alt_valid,
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
  alt_value: jnp.ndarray  # [N_ALT] int32 (meaningful where alt_valid)
  box_valid: jnp.ndarray  # [2] bool: the (first, last) ``box`` match is an int
  plus: jnp.ndarray  # [] bool: this candidate has a "+" sign (only ``box`` accepts it)
  binside: jnp.ndarray  # [] bool: inside a ``box`` candidate ("\boxed{" up to the next "}")
  bclean: jnp.ndarray  # [] bool: no "{" in the box content (so it is the list candidate's)


def parse_init(max_items: int) -> ParseState:
  z = jnp.int32(0)
  f = jnp.bool_(False)
  zi = jnp.zeros(max_items, jnp.int32)
  alt_f, alt_v = jnp.zeros(N_ALT, bool), jnp.zeros(N_ALT, jnp.int32)
  bv = jnp.zeros(2, bool)
  return ParseState(z, f, z, f, jnp.uint32(0), f, z, zi, f, z, zi, f, alt_f, alt_v, bv, f, f, f)


# Which alt results a box satisfying the content DFA as one int matches, by (ws seen, "+" sign,
# negative): grammars 1 -?d+, 2 d+, 3 s*-?d+s*, 4 s*d+s*, 5 s*[+-]?d+s* (given a clean box) each
# twice (first, last). A table lookup is ~3x cheaper per byte class on CPU than building the
# mask from the flags.
_ALT_OK = np.array(
  [
    [not (ws or plus), not (ws or neg or plus), not plus, not (neg or plus), True]
    for ws in (0, 1)
    for plus in (0, 1)
    for neg in (0, 1)
  ],
  bool,
).repeat(2, axis=1)
_ALT_IS_LAST = np.arange(N_ALT) % 2 == 1
_ALT_IS_BOX = np.arange(N_ALT) >= 2 * (BOX - 1)


def _latch(st: ParseState, c) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
  """``alt_found/alt_value/box_valid`` after byte class ``c`` (a closing brace commits the
  current candidates)."""
  closing = c == RB
  single = ((st.cs == S_DIGITS) | (st.cs == S_AFTER)) & (st.count == 0)
  row = st.ws.astype(jnp.int32) * 4 + st.plus.astype(jnp.int32) * 2 + st.neg.astype(jnp.int32)
  ok = single & jnp.asarray(_ALT_OK)[row]
  bcommit = st.binside & closing
  hit = jnp.where(_ALT_IS_BOX, bcommit, st.inside & closing & ok)
  ovf = st.bad | (~st.neg & (st.mag > jnp.uint32(INT32_MAX)))
  signed = jax.lax.bitcast_convert_type(
    jnp.where(st.neg, jnp.uint32(0) - st.mag, st.mag), jnp.int32
  )
  val = jnp.where(ovf, jnp.where(st.neg, INT32_MIN, INT32_MAX), signed).astype(jnp.int32)
  take = hit & (_ALT_IS_LAST | ~st.alt_found)
  return (
    st.alt_found | hit,
    jnp.where(take, val, st.alt_value),
    jnp.where(take[-2:], single & st.bclean, st.box_valid),
  )


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
        c == WS,
        S_START,
        jnp.where((c == MINUS) | (c == PLUS), S_SIGN, jnp.where(is_digit, S_DIGITS, S_DEAD)),
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
    plus=st.plus | ((st.cs == S_START) & (c == PLUS)),
  )
  # Closing brace: close the last int and commit this candidate as the latest answer.
  accept = (st.cs == S_DIGITS) | (st.cs == S_AFTER)
  fin = jax.tree.map(lambda a, b: jnp.where(accept, a, b), _push(st), st)
  commit = st.inside & (c == RB)
  alt_found, alt_value, box_valid = _latch(st, c)
  content = content._replace(ws=st.ws | (c == WS))
  out = jax.tree.map(lambda a, b: jnp.where(st.inside & (c != LB) & (c != RB), a, b), content, st)
  out = out._replace(
    alt_found=alt_found,
    alt_value=alt_value,
    box_valid=box_valid,
    found=jnp.where(commit, accept & ~fin.bad & ~st.plus, st.found),
    res_count=jnp.where(commit, fin.count, st.res_count),
    res_items=jnp.where(commit, fin.items, st.res_items),
    inside=jnp.where(c == LB, opened, jnp.where(c == RB, False, st.inside)),
    binside=(st.binside | opened) & (c != RB),
    bclean=(st.bclean & (c != LB)) | (opened & ~st.binside),
    pm=pm,
  )
  fresh = parse_init(st.items.shape[0])
  out = out._replace(
    cs=jnp.where(opened, S_START, out.cs),
    neg=out.neg & ~opened,
    mag=jnp.where(opened, jnp.uint32(0), out.mag),
    bad=out.bad & ~opened,
    ws=out.ws & ~opened,
    plus=out.plus & ~opened,
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
  """The answer so far: `Action(found, count, values, alt_found, alt_value, alt_valid)`
  (values zero-padded; ``alt_*`` the single-int modes, see `alt_index`)."""
  found = st.found
  valid = jnp.concatenate([st.alt_found[:-2], st.box_valid])
  return Action(
    found,
    jnp.where(found, st.res_count, 0),
    jnp.where(found, st.res_items, jnp.zeros_like(st.res_items)),
    st.alt_found,
    jnp.where(valid, st.alt_value, 0),
    valid,
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
