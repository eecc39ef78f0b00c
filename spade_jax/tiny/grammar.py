"""The designer language's grammar as a table automaton, and `GrammarMask`, its logits processor.

One automaton serves the sampler's mask (`GrammarMask`), the device assembler (`tiny.assemble`
scans it to parse) and the host checks of `Language.encode`/`decode` (`check_tokens`);
`transition` is written once over an array namespace, like `checks.check_program`.

**Tables** (host, cached per `Language`): tokens fall into classes (each keyword, the end token,
one class per opcode *signature* of `program.STRAIGHT_LINE_OPS`, general / special registers, lists,
``lguess``, tables, ``+``, ``-``, each digit, phrases); state x class -> next state (-1: not
allowed) and the edge's effects. The grammar is `assembly.py`'s order with each opcode's operand
kinds; immediates are a sign then at most 9 digits (no leading zero, no ``-0``); turns in
``[1, max_turns_cap]`` and immediate rewards in ``[-1000, 1000]`` are small digit automata.
What a table cannot count, per-sequence counters with per-edge effects and limits track:
statements per section, literal tokens and number slots per template, values per table.
Registers (lists, tables alike) are introduced in order -- an instruction writes ``r0..r{u}``,
``u`` = scalar registers written so far -- and read only once written, so nothing reads a
register nothing wrote and programs that only rename registers share one token form;
``answer`` needs some write first (a bit of the code states).

**Budget.** ``mincomp[q]`` is the fewest tokens from ``q`` to the end (the end token is the
tokenizer's ``<|im_end|>``, so sampling stops there). A token is allowed only if ``sampled + 1
+ mincomp[next] <= max_tokens``; every reachable state can finish (the shortest completion
needs no counter past its limit: specials, ``lguess`` and ``+0`` always fit), so every masked
sample is well-formed and ends within ``lang.max_tokens`` sampled tokens.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from spade_jax.envs.ir.program import OPS, STRAIGHT_LINE_OPS
from spade_jax.tiny.tokenizer import KEYWORDS

# ---------------------------------------------------------------------------- token classes
C_OTHER = 0
C_KW = {k: 1 + i for i, k in enumerate(KEYWORDS)}
C_END, C_REG, C_SPECIAL, C_LREG, C_LGUESS, C_TABLE, C_PLUS, C_MINUS = range(11, 19)
C_DIGIT0, C_PHRASE = 19, 29
SIGNATURES = tuple(sorted({OPS[name] for name in STRAIGHT_LINE_OPS if name != "nop"}))
C_SIG0 = 30
N_CLASSES = C_SIG0 + len(SIGNATURES)
DIGITS = tuple(range(C_DIGIT0, C_DIGIT0 + 10))
# Edge actions (what a token means to the parser in `tiny.assemble`).
ACT_NONE, ACT_TURNS, ACT_TABLE_VAL, ACT_OPCODE, ACT_DST, ACT_OPND, ACT_DIGIT = range(7)
ACT_ANSWER, ACT_CASE, ACT_PRED, ACT_REWARD, ACT_FLAG, ACT_LIT, ACT_SLOT = range(7, 14)
NUMBER_ACTS = (ACT_TURNS, ACT_TABLE_VAL, ACT_OPND, ACT_PRED, ACT_REWARD)
TPL_OBS_KIND, TPL_HINT_KIND, TPL_CASE_KIND = range(3)
# Roles of register / list / table tokens; counter ops.
NO_ROLE, READ, WRITE = range(3)
KEEP, INC, ZERO, ONE = range(4)
# Parse errors (indices into `tiny.assemble.REASONS`).
PARSE_REASONS = (
  "ok",
  "token not allowed here (grammar)",
  "scalar register read before written, or written out of order",
  "list register read before written, or written out of order",
  "table used before defined, or defined out of order",
  "too many tables",
  "too many reset instructions",
  "too many step instructions",
  "too many cases",
  "table too long",
  "template too long",
  "too many number slots in a template",
  "program has no end token",
)
E_OK, E_SYNTAX, E_REG, E_LIST, E_TABLE, E_TABLES, E_RESET, E_STEP, E_CASES = range(9)
E_TABLE_LONG, E_TPL_LONG, E_SLOTS, E_NO_END = range(9, len(PARSE_REASONS))


class Tables(NamedTuple):
  """Host (numpy) tables; ``[Q, C]`` arrays are indexed by state then class."""

  next: np.ndarray
  act: np.ndarray
  arg: np.ndarray
  role: np.ndarray
  ops: np.ndarray  # [Q, C, 3] counter op (item, tok, slot)
  lims: np.ndarray  # [Q, C, 3] limit of the counter after an INC / ONE
  errs: np.ndarray  # [Q, C, 3] error when the limit is exceeded
  mincomp: np.ndarray  # [Q] fewest tokens to the end
  cls: np.ndarray  # [V] token class
  idx: np.ndarray  # [V] register / list / table / special index, digit value or opcode
  start: int
  done: int
  names: tuple[str, ...]


# ------------------------------------------------------------------------------ builder
def _dfa_from_strings(strings):
  """Minimal acyclic DFA of a finite set of sign+digit strings: ``(entry {sign: node}, nodes
  [(accepting, {digit: node})])`` (tries merged bottom-up by their signature)."""
  trie: dict = {}
  for s in strings:
    node = trie
    for ch in s:
      node = node.setdefault(ch, {})
    node["$"] = {}
  nodes, memo = [], {}

  def canon(node):
    edges = tuple(sorted((int(ch), canon(sub)) for ch, sub in node.items() if ch.isdigit()))
    key = ("$" in node, edges)
    if key not in memo:
      memo[key] = len(nodes)
      nodes.append((key[0], dict(edges)))
    return memo[key]

  entry = {C_PLUS if ch == "+" else C_MINUS: canon(sub) for ch, sub in trie.items()}
  return entry, nodes


def _general_dfa():
  """Any int with at most 9 digits (fits int32 with no overflow check), canonical form."""
  nonzero = dict.fromkeys(range(1, 10), 3)  # nodes: "+", "-", "+0", then 1..9 digits read
  nodes = [(False, {0: 2, **nonzero}), (False, nonzero), (True, {})]
  nodes += [(True, dict.fromkeys(range(10), 3 + k) if k < 9 else {}) for k in range(1, 10)]
  return {C_PLUS: 0, C_MINUS: 1}, nodes


@dataclasses.dataclass
class _Edge:
  dst: int
  act: int = ACT_NONE
  arg: int = 0
  role: int = NO_ROLE
  counters: tuple = ((KEEP, 0, 0),) * 3  # (op, limit, error) for item, tok, slot


class _Builder:
  def __init__(self):
    self.names: list[str] = []
    self.ids: dict[str, int] = {}
    self.edges: dict[tuple[int, int], _Edge] = {}
    self.accept: dict[int, int] = {}  # accepting number state -> continuation state
    self.numbers: dict = {}

  def s(self, name: str) -> int:
    if name not in self.ids:
      self.ids[name] = len(self.names)
      self.names.append(name)
    return self.ids[name]

  def edge(self, src, classes, dst, act=ACT_NONE, arg=0, role=NO_ROLE, **counters):
    """Edges ``src --class--> dst``; ``counters`` item / tok / slot = (op, limit, error)."""
    effects = tuple(counters.get(k, (KEEP, 0, 0)) for k in ("item", "tok", "slot"))
    for c in classes:
      if (src, c) in self.edges:
        raise AssertionError(f"grammar conflict at {self.names[src]} class {c}")
      self.edges[src, c] = _Edge(dst, act, arg, role, effects)

  def number(self, src, kind, dfa, cont, act, arg=0, **effects):
    """Edges from ``src`` into a number (``dfa``) whose accepting states continue like ``cont``."""
    key = (kind, cont)
    if key not in self.numbers:
      entry, nodes = dfa
      ids = [self.s(f"num:{kind}:{i}>{self.names[cont]}") for i in range(len(nodes))]
      for i, (accepting, out) in enumerate(nodes):
        for d, j in out.items():
          self.edge(ids[i], [C_DIGIT0 + d], ids[j], act=ACT_DIGIT)
        if accepting:
          self.accept[ids[i]] = cont
      self.numbers[key] = {sign: ids[i] for sign, i in entry.items()}
    for sign, dst in self.numbers[key].items():
      self.edge(src, [sign], dst, act=act, arg=arg, **effects)

  def resolve(self):
    for q, cont in self.accept.items():
      for (src, c), e in list(self.edges.items()):
        if src == cont:
          if (q, c) in self.edges:
            raise AssertionError(f"ambiguous number end at {self.names[q]}")
          self.edges[q, c] = e


def _build(lang) -> _Builder:
  cfg = lang.cfg
  b = _Builder()
  start, done = b.s("start"), b.s("done")
  b.edge(done, [C_END], done)
  gen = _general_dfa()
  turns_dfa = _dfa_from_strings(f"+{v}" for v in range(1, cfg.max_turns_cap + 1))
  reward_dfa = _dfa_from_strings([f"+{v}" for v in range(1001)] + [f"-{v}" for v in range(1, 1001)])
  kw = lambda k: [C_KW[k]]
  # turns, tables
  turns, after_turns = b.s("turns"), b.s("after_turns")
  b.edge(start, kw("turns"), turns, item=(ZERO, 0, 0))
  b.number(turns, "turns", turns_dfa, after_turns, ACT_TURNS)
  tname, tfirst, tval = b.s("table_name"), b.s("table_first"), b.s("table_values")
  code = {(sec, w): b.s(f"code{sec}w{w}") for sec in (0, 1) for w in (0, 1)}
  for src in (after_turns, tval):
    b.edge(src, kw("table"), tname, item=(INC, cfg.n_tables, E_TABLES))
    b.edge(src, kw("reset"), code[0, 0], item=(ZERO, 0, 0))
  b.edge(tname, [C_TABLE], tfirst, role=WRITE)
  tl = (cfg.list_len, E_TABLE_LONG)
  b.number(tfirst, "gen", gen, tval, ACT_TABLE_VAL, tok=(ONE, *tl))
  b.number(tval, "gen", gen, tval, ACT_TABLE_VAL, tok=(INC, *tl))
  # reset and step code
  answer = b.s("answer")
  operands: dict = {}

  def operand_state(sec, j, rest):
    if not rest:
      return code[sec, 1]
    if (sec, j, rest) not in operands:
      q = operands[sec, j, rest] = b.s(f"opnd{sec}:{j}:{rest}")
      nxt, arg = operand_state(sec, j + 1, rest[1:]), 4 * sec + j
      if rest[0] == "S":
        b.edge(q, [C_REG], nxt, ACT_OPND, arg, READ)
        b.edge(q, [C_SPECIAL], nxt, ACT_OPND, arg)
        b.number(q, "gen", gen, nxt, ACT_OPND, arg)
      else:
        b.edge(q, [C_LREG, C_TABLE], nxt, ACT_OPND, arg, READ)
        b.edge(q, [C_LGUESS], nxt, ACT_OPND, arg)
    return operands[sec, j, rest]

  for sec, limit, err in ((0, cfg.n_reset, E_RESET), (1, cfg.n_step, E_STEP)):
    for g, (dst_kind, args) in enumerate(SIGNATURES):
      dst = b.s(f"dst{sec}:{g}")
      first = operand_state(sec, 0, args)
      b.edge(dst, [C_REG if dst_kind == "r" else C_LREG], first, ACT_DST, sec, WRITE)
      for w in (0, 1):
        b.edge(code[sec, w], [C_SIG0 + g], dst, ACT_OPCODE, sec, item=(INC, limit, err))
  for w in (0, 1):
    b.edge(code[0, w], kw("step"), code[1, w], item=(ZERO, 0, 0))
  b.edge(code[1, 1], kw("answer"), answer)
  # answer, templates, cases
  after_answer = b.s("after_answer")
  b.edge(answer, [C_REG, C_LREG], after_answer, ACT_ANSWER, 0, READ)
  fresh = dict(tok=(ZERO, 0, 0), slot=(ZERO, 0, 0))
  pred, reward, flag = b.s("case_pred"), b.s("case_reward"), b.s("case_flag")
  tpl = {}
  for kind, name in enumerate(("obs", "hint", "case")):
    empty, full, minus = b.s(f"{name}0"), b.s(name), b.s(f"{name}-")
    tpl[name] = (empty, full)
    lit = dict(act=ACT_LIT, arg=kind, tok=(INC, cfg.tpl_tokens, E_TPL_LONG))
    slot = dict(act=ACT_SLOT, arg=kind, slot=(INC, cfg.tpl_slots, E_SLOTS))
    for src in (empty, full):
      b.edge(src, [C_PHRASE], full, **lit)
      if src == full or kind != TPL_OBS_KIND:  # the observation starts with a phrase
        b.edge(src, DIGITS, full, **lit)
        b.edge(src, [C_MINUS], minus, **dict(lit, tok=(INC, cfg.tpl_tokens - 1, E_TPL_LONG)))
        b.edge(src, [C_REG, C_LREG], full, role=READ, **slot)
        b.edge(src, [C_SPECIAL, C_LGUESS], full, **slot)
    b.edge(minus, DIGITS, full, **lit)
  b.edge(after_answer, kw("obs"), tpl["obs"][0], **fresh)
  b.edge(tpl["obs"][1], kw("hint"), tpl["hint"][0], **fresh)
  for src in (tpl["obs"][1], tpl["hint"][1]):
    b.edge(src, kw("case"), pred, ACT_CASE, item=(ONE, cfg.n_cases, E_CASES))
  b.edge(tpl["case"][1], kw("case"), pred, ACT_CASE, item=(INC, cfg.n_cases, E_CASES))
  b.edge(tpl["case"][1], [C_END], done)
  b.edge(pred, [C_REG], reward, ACT_PRED, 0, READ)
  b.edge(pred, [C_SPECIAL], reward, ACT_PRED)
  b.number(pred, "pred", gen, reward, ACT_PRED)
  b.edge(reward, [C_REG], flag, ACT_REWARD, 0, READ)
  b.edge(reward, [C_SPECIAL], flag, ACT_REWARD)
  b.number(reward, "reward", reward_dfa, flag, ACT_REWARD)
  b.edge(flag, kw("stop") + kw("go"), tpl["case"][0], ACT_FLAG, **fresh)
  b.resolve()
  return b


def token_classes(lang) -> tuple[np.ndarray, np.ndarray]:
  """``(cls [V], idx [V])`` of every token id of ``lang``'s tokenizer."""
  cls, idx = np.zeros(lang.vocab_size, np.int32), np.zeros(lang.vocab_size, np.int32)
  groups = [(lang.reg_ids, C_REG), (lang.special_ids, C_SPECIAL), (lang.list_ids, C_LREG)]
  groups += [(lang.table_ids, C_TABLE), (lang.phrase_ids, C_PHRASE), ([lang.end_id], C_END)]
  groups += [([lang.lguess_id], C_LGUESS), ([lang.plus_id], C_PLUS), ([lang.minus_id], C_MINUS)]
  groups += [([t], C_KW[k]) for k, t in zip(KEYWORDS, lang.keyword_ids)]
  for ids, c in groups:
    cls[list(ids)], idx[list(ids)] = c, np.arange(len(ids))
  cls[list(lang.digit_ids)], idx[list(lang.digit_ids)] = (
    np.arange(C_DIGIT0, C_DIGIT0 + 10),
    range(10),
  )
  for op, t in enumerate(lang.op_ids, start=1):
    cls[t], idx[t] = C_SIG0 + SIGNATURES.index(OPS[STRAIGHT_LINE_OPS[op]]), op
  return cls, idx


@functools.lru_cache(maxsize=8)
def tables(lang) -> Tables:
  """The automaton of ``lang`` (host numpy arrays; cached per language)."""
  b = _build(lang)
  Q, C = len(b.names), N_CLASSES
  nxt = np.full((Q, C), -1, np.int32)
  act, arg, role = (np.zeros((Q, C), np.int32) for _ in range(3))
  ops, lims, errs = (np.zeros((Q, C, 3), np.int32) for _ in range(3))
  for (q, c), e in b.edges.items():
    nxt[q, c], act[q, c], arg[q, c], role[q, c] = e.dst, e.act, e.arg, e.role
    for k, (op, lim, err) in enumerate(e.counters):
      ops[q, c, k], lims[q, c, k], errs[q, c, k] = op, lim, err
  dist = np.where(np.arange(Q) == b.ids["done"], 0, 1 << 20)
  for _ in range(Q):  # shortest completions: Bellman-Ford over unit-cost edges
    dist = np.minimum(dist, np.where(nxt >= 0, 1 + dist[np.maximum(nxt, 0)], 1 << 20).min(1))
  if dist.max() >= 1 << 20:
    raise AssertionError("grammar has a state that cannot reach the end")
  ids = (b.ids["start"], b.ids["done"], tuple(b.names))
  return Tables(
    nxt, act, arg, role, ops, lims, errs, dist.astype(np.int32), *token_classes(lang), *ids
  )


# --------------------------------------------------------------------------- transition
STATE_KEYS = ("q", "item", "tok", "slot", "ur", "ul", "nt")


def initial_state(tb: Tables, shape=(), xp=np) -> dict:
  st = {k: xp.zeros(shape, xp.int32) for k in STATE_KEYS}
  st["q"] = st["q"] + tb.start
  return st


def transition(tb: Tables, st: dict, token, xp=np):
  """One token in state ``st`` (arrays broadcasting against ``token``) -> ``(err, new state,
  edge)``; ``err`` indexes `PARSE_REASONS` (0: allowed), ``edge`` = (class, idx, act, arg)."""
  T = lambda a: xp.asarray(a)
  c, ix = T(tb.cls)[token], T(tb.idx)[token]
  q = st["q"]
  nq = T(tb.next)[q, c]
  role = T(tb.role)[q, c]
  err = xp.where(nq < 0, E_SYNTAX, E_OK)
  new = dict(st, q=xp.where(nq < 0, tb.done, nq))
  for k, name in enumerate(("item", "tok", "slot")):
    op, lim, e = T(tb.ops)[q, c, k], T(tb.lims)[q, c, k], T(tb.errs)[q, c, k]
    v = st[name]
    v = xp.where(op == INC, v + 1, xp.where(op == ZERO, 0, xp.where(op == ONE, 1, v)))
    err = xp.where((err == E_OK) & ((op == INC) | (op == ONE)) & (v > lim), e, err)
    new[name] = v
  for cl, key, code in ((C_REG, "ur", E_REG), (C_LREG, "ul", E_LIST), (C_TABLE, "nt", E_TABLE)):
    here = c == cl
    u = st[key]
    write_ok = (ix == u) if cl == C_TABLE else (ix <= u)
    bad = here & (((role == READ) & (ix >= u)) | ((role == WRITE) & ~write_ok))
    err = xp.where((err == E_OK) & bad, code, err)
    new[key] = xp.where(here & (role == WRITE), xp.maximum(u, ix + 1), u)
  return err, new, (c, ix, T(tb.act)[q, c], T(tb.arg)[q, c])


def check_tokens(lang, tokens) -> tuple[int, int]:
  """Host check of a token stream: ``(reason, position)``; reason 0 = a complete program
  (tokens after the end token are ignored)."""
  tb = tables(lang)
  st = initial_state(tb)
  for i, t in enumerate(tokens):
    if not 0 <= int(t) < lang.vocab_size:
      return E_SYNTAX, i
    err, st, _ = transition(tb, st, int(t))
    if err:
      return int(err), i
    if int(st["q"]) == tb.done:
      return E_OK, i
  return E_NO_END, len(tokens)


# ---------------------------------------------------------------------------- the mask
@dataclasses.dataclass(frozen=True)
class GrammarMask:
  """`sampling.LogitsProcessor` that keeps every sample a well-formed program of ``lang``
  ending within ``lang.max_tokens`` sampled tokens (module docstring). It advances only on
  sampled tokens (the designer prompt is prefilled or forced); after the end token (or a
  token the mask did not allow) only the end token stays allowed."""

  lang: object

  def init_state(self, batch: int):
    st = initial_state(tables(self.lang), (batch,), jnp)
    st["n"] = jnp.zeros((batch,), jnp.int32)
    return st

  def mask(self, st, logits_BV):
    tb = tables(self.lang)
    V = logits_BV.shape[1]  # may exceed the tokenizer's (padded model vocabulary): C_OTHER
    fit = lambda a: np.pad(a[:V], (0, max(0, V - len(a))))
    cls_V = fit(tb.cls)
    ext = tb._replace(cls=cls_V, idx=fit(tb.idx))
    tok_V = jnp.arange(V)
    sub = {k: v[:, None] for k, v in st.items() if k != "n"}
    err_BV, new, _ = transition(ext, sub, tok_V[None, :], jnp)
    remaining_B = self.lang.max_tokens - st["n"] - 1
    fits_BV = jnp.asarray(tb.mincomp)[new["q"]] <= remaining_B[:, None]
    ok_BV = (err_BV == E_OK) & fits_BV & (jnp.asarray(cls_V) != C_OTHER)
    at_end_B = st["q"] == tb.done  # finished (or derailed): only the end token
    ok_BV = jnp.where(at_end_B[:, None], tok_V[None, :] == self.lang.end_id, ok_BV)
    return jnp.where(ok_BV, logits_BV, -jnp.inf)

  def update(self, st, token_B, was_sampled_B):
    tb = tables(self.lang)
    tok_B = jnp.clip(token_B, 0, len(tb.cls) - 1)
    sub = {k: v for k, v in st.items() if k != "n"}
    err_B, new, _ = transition(tb, sub, tok_B, jnp)
    new["q"] = jnp.where((err_B != E_OK) | (token_B >= len(tb.cls)), tb.done, new["q"])
    new["n"] = st["n"] + 1
    return {k: jnp.where(was_sampled_B, new[k], st[k]) for k in st}
