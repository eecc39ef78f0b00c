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
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.envs.ir.program import Action

_WS_BYTES = b" \t\n\r\x0b\x0c"
_BOXED_B = re.compile(rb"\\boxed\{([^{}]*)\}")
_INTS_B = re.compile(
  rb"[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*(?:,[ \t\n\r\f\v]*-?[0-9]+[ \t\n\r\f\v]*)*"
)
_INT_B = re.compile(rb"-?[0-9]+")

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


def parse_init(max_items: int) -> ParseState:
  z = jnp.int32(0)
  f = jnp.bool_(False)
  zi = jnp.zeros(max_items, jnp.int32)
  return ParseState(z, f, z, f, jnp.uint32(0), f, z, zi, f, z, zi)


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
  out = jax.tree.map(lambda a, b: jnp.where(st.inside & (c != LB) & (c != RB), a, b), content, st)
  out = out._replace(
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
  """The answer so far: `Action(found, count, values)` (values zero-padded)."""
  found = st.found
  return Action(
    found,
    jnp.where(found, st.res_count, 0),
    jnp.where(found, st.res_items, jnp.zeros_like(st.res_items)),
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
