"""Templates: literal text + numbers rendered to token ids, on device, equal to `encode`.

A template is a sequence of items: literal text, a scalar register (rendered as a decimal int)
or a list register (rendered as ``"a, b, c"``). It is compiled once per tokenizer into
literal token ids plus *number slots*; on device a slot emits the decimal digit tokens of its
value, so rendering is a fixed-shape gather with no host round trip.

Why this equals ``tokenizer.encode`` of the rendered string: the supported tokenizers (SmolLM2,
Qwen, the test BPE) give every decimal digit its own token, so a digit never merges with its
neighbours; each literal segment is therefore tokenised *in its digit context* (``"0" + text +
"0"`` minus the two context tokens: SmolLM2 splits trailing whitespace differently before a
digit than at the end of a string). What still depends on the value is handled by per-slot
variants: a minus sign may merge with the text before it (SmolLM2 encodes ``" -5"`` as
``" -"``, ``"5"``), so a slot stores the tokens that replace the end of the preceding text when
the value is negative; an empty list joins the texts around it (``"{" + "}"`` may become
``"{}"``), so a list slot also stores that replacement. List separators have two variants
(``", "`` / ``", -"``). Compilation *verifies* the result: the template is rendered by
`render_host` (the host mirror of the device renderer) for every combination of slot variants
(up to `MAX_VARIANT_COMBOS`) and for value probes (int32 extremes, long lists with negative
elements), and compared with ``encode`` of the same string; any mismatch (e.g. a tokenizer that
merges digits, or a negative number right after an empty list with no text between) raises
`TemplateError` when the program is built, never silent drift.
"""

from __future__ import annotations

import itertools
import random
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.envs.ir.program import SLOT_INT, SLOT_LIST, SLOT_NONE, EnvProgram, ProgramConfig

# Probe values used to verify a compiled template against `tokenizer.encode`.
INT_PROBES = (7, -3, 0, 42, -(2**31), 2**31 - 1, 1234567, -90)
LIST_PROBES = ((), (5,), (-1, 20, -300), (0, -7), (12, 3), tuple(range(-5, 7)), (-8,))
MAX_VARIANT_COMBOS = 729
_POW10_10 = np.array([10**k for k in range(9, -1, -1)], np.uint32)  # 1e9 .. 1


class TemplateError(ValueError):
  """A template that this tokenizer cannot render on device exactly as `encode` does."""


class Tokens(NamedTuple):
  """A rendered text: token ids in a fixed-size buffer (padding 0) and the used length."""

  ids: jnp.ndarray  # [obs_len] int32
  length: jnp.ndarray  # [] int32


# ------------------------------------------------------------------------------ host side
def tokenizer_constants(tokenizer, cfg: ProgramConfig) -> dict[str, np.ndarray]:
  """Digit token ids and the two list-separator variants for ``tokenizer``."""
  digit_ids = []
  for d in range(10):
    ids = tokenizer.encode(str(d))
    if len(ids) != 1:
      raise TemplateError(
        f"digit {d} encodes to {ids}: the tokenizer must give each decimal digit its own token"
      )
    digit_ids.append(ids[0])
  sep = [encode_between_digits(tokenizer, t, True, True, digit_ids[0]) for t in (", ", ", -")]
  sep_ids = np.zeros((2, cfg.tail_len), np.int32)
  for i, ids in enumerate(sep):
    if len(ids) > cfg.tail_len:
      raise TemplateError(f"list separator encodes to {len(ids)} tokens > tail_len")
    sep_ids[i, : len(ids)] = ids
  return dict(
    digit_ids=np.array(digit_ids, np.int32),
    sep_ids=sep_ids,
    sep_len=np.array([len(s) for s in sep], np.int32),
  )


def encode_between_digits(tokenizer, text: str, left: bool, right: bool, zero: int) -> list[int]:
  """Token ids of ``text`` as it tokenises with a digit on its left and/or right (a
  tokenizer's split of e.g. trailing whitespace can depend on what follows): encodes
  ``"0" + text + "0"`` and removes the two context digit tokens."""
  ids = tokenizer.encode(("0" if left else "") + text + ("0" if right else ""))
  if left:
    if not ids or ids[0] != zero:
      raise TemplateError(f"a digit merges with the text after it in {'0' + text!r}")
    ids = ids[1:]
  if right:
    if not ids or ids[-1] != zero:
      raise TemplateError(f"a digit merges with the text before it in {text + '0'!r}")
    ids = ids[:-1]
  return ids


def items_text(items, regs, lists) -> str:
  """The string a template renders to (the Python reference), given register values."""
  out = []
  for kind, val in items:
    if kind == "text":
      out.append(val)
    elif kind == "reg":
      out.append(str(int(regs[val])))
    else:
      out.append(", ".join(str(int(v)) for v in lists[val]))
  return "".join(out)


def compile_template(items, tokenizer, cfg: ProgramConfig, consts) -> dict[str, np.ndarray]:
  """Items ``("text", str) | ("reg", i) | ("list", i)`` -> the arrays of one template.
  Raises `TemplateError` if the template is too large or does not render like `encode`."""
  texts, refs = [""], []  # texts[i] precedes refs[i]; texts[-1] ends the template
  for kind, val in items:
    if kind == "text":
      texts[-1] += val
    else:
      refs.append((kind, int(val)))
      texts.append("")
  if len(refs) > cfg.tpl_slots:
    raise TemplateError(f"{len(refs)} number slots > tpl_slots {cfg.tpl_slots}")
  last = len(refs)  # texts[k] has a number on its left if k > 0, on its right if k < last
  zero = int(consts["digit_ids"][0])
  enc = lambda t, k0, k1: encode_between_digits(tokenizer, t, k0 > 0, k1 < last, zero)
  seg = [enc(t, k, k) for k, t in enumerate(texts)]
  ids = [i for s in seg for i in s]
  if len(ids) > cfg.tpl_tokens:
    raise TemplateError(f"template has {len(ids)} literal tokens > tpl_tokens {cfg.tpl_tokens}")
  tpl = dict(
    ids=np.zeros(cfg.tpl_tokens, np.int32),
    len=np.int32(len(ids)),
    slots=np.zeros((cfg.tpl_slots, 6), np.int32),
    tail=np.zeros((cfg.tpl_slots, 2, cfg.tail_len), np.int32),
    tail_len=np.zeros((cfg.tpl_slots, 2), np.int32),
  )
  tpl["ids"][: len(ids)] = ids
  pos = 0
  for s, (kind, val) in enumerate(refs):
    pos += len(seg[s])
    before, after = seg[s], seg[s + 1]
    neg = enc(texts[s] + "-", s, s)  # the value's minus sign may merge with the text before it
    c = _common_prefix(before, neg)
    variants = [(len(before) - c, 0, neg[c:])]
    if kind == "list":  # an empty list joins the texts around it
      joined = enc(texts[s] + texts[s + 1], s, s + 1)
      c = _common_prefix(before, joined)
      d = _common_prefix(after[::-1], joined[c:][::-1])
      variants.append((len(before) - c, len(after) - d, joined[c : len(joined) - d]))
    else:
      variants.append((0, 0, []))
    for v, (_, _, t) in enumerate(variants):
      if len(t) > cfg.tail_len:
        raise TemplateError(
          f"slot {s}: {len(t)} context-dependent tokens > tail_len "
          f"{cfg.tail_len} around {texts[s]!r} / {texts[s + 1]!r}"
        )
      tpl["tail"][s, v, : len(t)] = t
      tpl["tail_len"][s, v] = len(t)
    tpl["slots"][s] = (
      SLOT_INT if kind == "reg" else SLOT_LIST,
      val,
      pos,
      variants[0][0],
      variants[1][0],
      variants[1][1],
    )
  _verify(tpl, items, tokenizer, cfg, consts)
  return tpl


def _common_prefix(a, b) -> int:
  n = 0
  while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
  return n


def _probe_assignments(items, cfg):
  """Register values to verify a template with: (1) every combination of each slot's
  tokenisation variant (int: >= 0 / < 0; list: empty / first >= 0 / first < 0) -- all of them
  up to `MAX_VARIANT_COMBOS`, a fixed random subset beyond -- and (2) the value probes
  (extremes, long lists with negative elements) cycled over the slots."""
  refs = list(dict.fromkeys((k, int(v)) for k, v in items if k != "text"))
  options = [((7,), (-3,)) if k == "reg" else ((), (5, -6), (-1, 20)) for k, _ in refs]
  combos = list(itertools.islice(itertools.product(*options), MAX_VARIANT_COMBOS + 1))
  if len(combos) > MAX_VARIANT_COMBOS:
    rng = random.Random(0)
    combos = [tuple(rng.choice(o) for o in options) for _ in range(MAX_VARIANT_COMBOS)]
  for combo in combos:
    yield (
      {v: c[0] for (k, v), c in zip(refs, combo) if k == "reg"},
      {v: c for (k, v), c in zip(refs, combo) if k == "list"},
    )
  for j in range(max(len(INT_PROBES), len(LIST_PROBES))):
    yield (
      {v: INT_PROBES[(j + s) % len(INT_PROBES)] for s, (k, v) in enumerate(refs) if k == "reg"},
      {
        v: LIST_PROBES[(j + s) % len(LIST_PROBES)][: cfg.list_len]
        for s, (k, v) in enumerate(refs)
        if k == "list"
      },
    )


def _verify(tpl, items, tokenizer, cfg, consts):
  for regs, lists in _probe_assignments(items, cfg):
    text = items_text(items, regs, lists)
    want = tokenizer.encode(text) if text else []
    got = render_host(tpl, regs, lists, consts)
    if got != want:
      raise TemplateError(
        f"on-device rendering of {text!r} gives tokens {got} but tokenizer.encode gives {want}"
      )


def render_host(tpl, regs, lists, consts) -> list[int]:
  """Host mirror of `render`: one compiled template + register values -> token ids."""
  n = int(tpl["len"])
  slot_vals, suppressed = [], set()
  for s in range(len(tpl["slots"])):
    kind, reg, pos, drop, edrop, eafter = (int(x) for x in tpl["slots"][s])
    if kind == SLOT_NONE:
      break
    vals = [int(regs[reg])] if kind == SLOT_INT else [int(v) for v in lists[reg]]
    slot_vals.append((pos, s, vals))
    if vals and vals[0] < 0:
      suppressed.update(range(pos - drop, pos))
    elif not vals:
      suppressed.update(range(pos - edrop, pos + eafter))
  out: list[int] = []
  digits, sep, sep_len = consts["digit_ids"], consts["sep_ids"], consts["sep_len"]
  tail = lambda s, v: [int(t) for t in tpl["tail"][s][v][: int(tpl["tail_len"][s][v])]]
  for i in range(n + 1):
    for pos, s, vals in slot_vals:
      if pos != i:
        continue
      if not vals:
        out += tail(s, 1)
      for j, v in enumerate(vals):
        if j == 0 and v < 0:
          out += tail(s, 0)
        elif j > 0:
          out += [int(t) for t in sep[int(v < 0)][: int(sep_len[int(v < 0)])]]
        out += [int(digits[int(c)]) for c in str(abs(v))]
    if i < n and i not in suppressed:
      out.append(int(tpl["ids"][i]))
  return out


def template_items(program: EnvProgram, t: int, tokenizer) -> list:
  """Inverse of `compile_template` (for disassembly): template ``t`` back to items."""
  n = int(program.tpl_len[t])
  ids = [int(i) for i in program.tpl_ids[t][:n]]
  items, start = [], 0
  for kind, reg, pos, *_ in np.asarray(program.tpl_slots[t]):
    if kind == SLOT_NONE:
      break
    if pos > start:
      items.append(("text", tokenizer.decode(ids[start:pos])))
    items.append(("reg" if kind == SLOT_INT else "list", int(reg)))
    start = int(pos)
  if n > start:
    items.append(("text", tokenizer.decode(ids[start:n])))
  return items


# ---------------------------------------------------------------------------- device side
def decimal_digits(v):
  """Decimal digits of ``abs(v)`` (int32 scalar, INT_MIN included) -> (digits [10], count)."""
  u = jnp.abs(v).astype(jnp.uint32)  # abs(INT_MIN) wraps to INT_MIN, which is 2**31 as uint32
  d = (u // _POW10_10) % 10
  count = jnp.maximum(1, 10 - jnp.argmax(jnp.concatenate([d[:-1] != 0, jnp.array([True])])))
  return d.astype(jnp.int32), count.astype(jnp.int32)


def render(program: EnvProgram, t, regs, lists, list_len, cfg: ProgramConfig, out_len=None):
  """Renders template ``t`` of ``program`` with registers ``regs`` [n_regfile] and lists
  ``lists`` [n_listfile, list_len] (lengths ``list_len``) -> ``(Tokens, cut)``; ``cut`` is
  True when the text needed more than ``out_len`` (default ``cfg.obs_len``) tokens (the caller
  flags a fault); the buffer always has ``cfg.obs_len`` entries (zero beyond ``out_len``), and
  the cost grows with ``out_len``.

  The output is the pieces ``lit_0, slot_0, lit_1, slot_1, ..., lit_S``: literal segments
  (contiguous after a slot's variant removed tokens at their ends) and slots (elements, each
  prefix tokens + digits). Every output position finds its piece and element by comparing
  against cumulative lengths and gathers its token: no scatter, so it vectorises well."""
  program = jax.tree.map(jnp.asarray, program)
  ids, n = program.tpl_ids[t], program.tpl_len[t]
  slots, tail, tail_len = program.tpl_slots[t], program.tpl_tail[t], program.tpl_tail_len[t]
  kind, reg, pos = slots[:, 0], slots[:, 1], slots[:, 2]
  drop, edrop, eafter = slots[:, 3], slots[:, 4], slots[:, 5]
  n_slots, lw = cfg.tpl_slots, cfg.list_len
  # Element values and counts per slot: [S, LW].
  lreg = jnp.clip(reg, 0, lists.shape[0] - 1)
  int_vals = jnp.zeros((n_slots, lw), jnp.int32).at[:, 0].set(regs[reg])
  vals = jnp.where((kind == SLOT_INT)[:, None], int_vals, lists[lreg])
  n_el = jnp.where(kind == SLOT_INT, 1, jnp.where(kind == SLOT_LIST, list_len[lreg], 0))
  first_neg = (n_el > 0) & (vals[:, 0] < 0)
  empty = (kind == SLOT_LIST) & (n_el == 0)
  # Element prefixes: element 0 uses the slot's negative / empty-list variant (an empty list
  # is one element with no digits), later elements the list separator.
  el = jnp.arange(lw)
  neg_i = (vals < 0).astype(jnp.int32)
  variant = empty.astype(jnp.int32)
  first_pre = tail[jnp.arange(n_slots), variant]  # [S, PW]
  first_len = jnp.where(first_neg | empty, tail_len[jnp.arange(n_slots), variant], 0)
  pre_ids = jnp.where((el == 0)[None, :, None], first_pre[:, None, :], program.sep_ids[neg_i])
  pre_len = jnp.where((el == 0)[None, :], first_len[:, None], program.sep_len[neg_i])
  mag = jnp.abs(vals).astype(jnp.uint32)  # abs(INT_MIN) wraps to 2**31 as uint32
  nd = 1 + jnp.sum(mag[..., None] >= _POW10_10[None, None, :-1], -1).astype(jnp.int32)
  live = el[None, :] < jnp.maximum(n_el, variant)[:, None]
  el_len = jnp.where(live, pre_len + jnp.where(empty[:, None], 0, nd), 0)  # [S, LW]
  el_end = jnp.cumsum(el_len, 1)
  # Literal segments: seg k runs from the previous slot's position to slot k's position,
  # minus the tokens the slots' variants replace.
  prev_pos = jnp.concatenate([jnp.zeros(1, jnp.int32), pos])  # [S + 1]
  active = kind != SLOT_NONE
  seg_end = jnp.concatenate([jnp.where(active, pos, n), n[None]])
  seg_end = jnp.where(jnp.arange(n_slots + 1) > jnp.sum(active), n, seg_end)
  prev_pos = jnp.where(jnp.arange(n_slots + 1) > jnp.sum(active), n, prev_pos)
  cut_tail = jnp.where(first_neg, drop, jnp.where(empty, edrop, 0))
  cut_head = jnp.where(empty, eafter, 0)
  seg_start = prev_pos + jnp.concatenate([jnp.zeros(1, jnp.int32), cut_head])
  seg_end = seg_end - jnp.concatenate([cut_tail, jnp.zeros(1, jnp.int32)])
  seg_len = jnp.maximum(seg_end - seg_start, 0)
  piece_len = jnp.stack([seg_len[:-1], el_end[:, -1]], 1).reshape(-1)
  piece_len = jnp.append(piece_len, seg_len[-1])  # [2S + 1]
  piece_end = jnp.cumsum(piece_len)
  length = piece_end[-1]
  # Each output position -> piece, then literal index or (slot, element, offset).
  out_len = cfg.obs_len if out_len is None else out_len
  p = jnp.arange(out_len)
  piece = jnp.sum(p[:, None] >= piece_end[None, :], 1)
  piece_c = jnp.clip(piece, 0, 2 * n_slots)
  off = p - (piece_end[piece_c] - piece_len[piece_c])
  k = piece_c // 2
  lit = ids[jnp.clip(seg_start[k] + off, 0, cfg.tpl_tokens - 1)]
  ks = jnp.clip(k, 0, n_slots - 1)
  j = jnp.clip(jnp.sum(off[:, None] >= el_end[ks], 1), 0, lw - 1)
  q = off - (el_end[ks, j] - el_len[ks, j])
  plen = pre_len[ks, j]
  pre_tok = pre_ids[ks, j, jnp.clip(q, 0, cfg.tail_len - 1)]
  power = jnp.asarray(_POW10_10)[jnp.clip(10 - nd[ks, j] + q - plen, 0, 9)]
  dig_tok = program.digit_ids[((mag[ks, j] // power) % 10).astype(jnp.int32)]
  tok = jnp.where(piece_c % 2 == 0, lit, jnp.where(q < plen, pre_tok, dig_tok))
  tok = jnp.where(p < length, tok, 0)
  tok = jnp.pad(tok, (0, cfg.obs_len - out_len))
  return Tokens(tok, jnp.minimum(length, out_len).astype(jnp.int32)), length > out_len
