"""Translator: subscripts and slices, f-strings, comprehensions and loop iterables.

Indexes are exact Python semantics: constant indexes (negative ones too) are resolved when the
length is known; a run-time index must be proven in range (``get`` with Python's negative
indexing). The answer's ints are read without an index fault (a ``dot`` with a one-hot table),
after a guard has proven that Python would not raise. Loops and comprehensions are unrolled
over iterables of known length (at most 64 items).
"""

from __future__ import annotations

import ast

from spade_jax.envs.translate.ops import cat, int_like, kind_name
from spade_jax.envs.translate.values import (
  LGUESS,
  Answer,
  Builtin,
  Int,
  Lst,
  Matches,
  MatchStr,
  MatchTuple,
  Refusal,
  Seed,
  Text,
  bounds,
  const_int,
  is_const,
  snippet,
)


class Seqs:
  """Sequence expressions (mixed into the lowerer)."""

  # -------------------------------------------------------------------------- subscripts
  def expr_Subscript(self, node):
    v = self.expr(node.value)
    if isinstance(node.slice, ast.Slice):
      return self.slice_value(v, node)
    idx = self.expr(node.slice)
    if isinstance(v, dict):
      if not is_const(idx) or idx not in v:
        raise Refusal(
          f"`{snippet(node)}`: dict lookups need a constant key present in the dict", node
        )
      return v[idx]
    if isinstance(v, str | tuple | range) and const_int(idx):
      try:
        return v[int(idx)]
      except IndexError:
        raise Refusal(f"`{snippet(node)}`: index out of range", node) from None
    if isinstance(v, Answer):
      self.require(node.value, "truthy", "indexing it")
      if not const_int(idx):
        raise Refusal(f"`{snippet(node)}`: only constant indexes into the answer", node)
      k, n = int(idx), self.has_fact(node.value, "len")
      if k < 0 and n:
        k += n
      if k < 0 or (k > 0 and not (n and k < n)):
        raise Refusal(
          f"`{snippet(node)}` may be out of range; check `len({snippet(node.value)}) == N` first",
          node,
        )
      return self.onehot_get(LGUESS, k, node)
    if isinstance(v, Matches):
      self.require(node.value, "truthy", "indexing it")
      if not (const_int(idx) and int(idx) in (0, -1)):
        raise Refusal(f"`{snippet(node)}`: use the last (or first) match only", node)
      return MatchStr(0) if v.groups == 1 else MatchTuple(v.groups)
    if isinstance(v, MatchTuple) and const_int(idx) and -v.groups <= int(idx) < v.groups:
      return MatchStr(int(idx) % v.groups)
    if isinstance(v, Lst | tuple):
      lst = v if isinstance(v, Lst) else self.lst_from(v, node, False)
      if not isinstance(lst.length, int):
        raise Refusal(f"`{snippet(node)}`: indexing a list of run-time length", node)
      n = lst.length
      if const_int(idx):
        k = int(idx)
        if not -n <= k < n:
          raise Refusal(f"`{snippet(node)}`: index {k} out of range for length {n}", node)
        if isinstance(v, tuple):
          return v[k]
        return self.elems(lst, node)[k]
      self.check_int(idx, node)
      lo, hi, _ = bounds(idx)
      if lo < -n or hi >= n:
        raise Refusal(
          f"`{snippet(node)}`: index range [{lo}, {hi}] may be out of range for length {n}", node
        )
      return self.list_scalar("get", lst, node, [idx], lst.lo, lst.hi)
    raise Refusal(f"subscript `{snippet(node)}` of {kind_name(v)}", node)

  def slice_value(self, v, node):
    s = node.slice
    parts = [self.expr(p) if p is not None else None for p in (s.lower, s.upper, s.step)]
    if not all(p is None or const_int(p) for p in parts):
      raise Refusal(f"`{snippet(node)}`: only constant slices are translatable", node)
    sl = slice(*parts)
    if isinstance(v, str | tuple | range):
      return v[sl]
    if isinstance(v, Lst) and isinstance(v.length, int):
      if v.elems is None and parts[0] in (None, 0) and parts[2] is None and parts[1] is not None:
        k = parts[1]
        n = len(range(v.length)[sl])
        return self.list_result("take", [self.list_operand(v, node), k], n, v.lo, v.hi, node)
      return self.lst_from(self.elems(v, node)[sl], node)
    raise Refusal(f"slice `{snippet(node)}` of {kind_name(v)}", node)

  # ----------------------------------------------------------------------------- f-strings
  def expr_JoinedStr(self, node):
    out = ""
    for part in node.values:
      if isinstance(part, ast.Constant):
        out = cat(out, part.value)
        continue
      v = self.expr(part.value)
      spec = self.expr(part.format_spec) if part.format_spec is not None else ""
      if not isinstance(spec, str):
        raise Refusal("a run-time format spec is outside the translatable subset", part)
      if is_const(v) and not isinstance(v, Seed):
        conv = {-1: lambda x: x, 115: str, 114: repr, 97: ascii}[part.conversion]
        out = cat(out, format(conv(v), spec))
        continue
      if spec or part.conversion not in (-1, 115, 114):
        raise Refusal(
          f"format `{snippet(part)}` of a run-time value is outside the translatable subset", part
        )
      if part.conversion == 114 and not int_like(v):
        raise Refusal(f"`{snippet(part)}`: repr of a run-time value", part)
      out = cat(out, self.to_text(v, part.value))
    return out

  # ------------------------------------------------------------------------ comprehensions
  def comprehension(self, node) -> list:
    """Values of a list comprehension / generator over constant-length iterables."""
    out: list = []
    self.push_scope()
    try:
      self._comp(node, node.generators, out)
    finally:
      self.pop_scope()
    return out

  def _comp(self, node, gens, out) -> None:
    if not gens:
      out.append(self.expr(node.elt))
      return
    g = gens[0]
    if g.is_async:
      raise Refusal("async comprehensions are outside the translatable subset", node)
    for item in self.iterate(self.expr(g.iter), g.iter):
      self.bind(g.target, item)
      keep = True
      for test in g.ifs:
        c = self.condition(test)
        if isinstance(c, Int):
          raise Refusal(
            f"comprehension filter `{snippet(test)}` depends on run-time data (only `sum(...)` "
            "of such a generator is translatable)",
            test,
          )
        keep = keep and c
      if keep:
        self._comp(node, gens[1:], out)

  def expr_ListComp(self, node):
    vals = self.comprehension(node)
    if all(int_like(v) for v in vals) and self.code is not None:
      return self.lst_from(vals, node)
    return tuple(vals)

  expr_GeneratorExp = expr_ListComp

  def iterate(self, v, node) -> list:
    """The items of a loop/comprehension iterable, one by one (its length must be known)."""
    if isinstance(v, range | tuple | list | str):
      if len(v) > 64:
        raise Refusal(f"loop over {len(v)} items is too long to unroll (limit 64)", node)
      return list(v)
    if isinstance(v, dict):
      return list(v)
    if isinstance(v, Lst):
      return list(self.elems(v, node))
    if isinstance(v, Text):
      raise Refusal(f"iterating over run-time text `{snippet(node)}`", node)
    if isinstance(v, Builtin) or not is_const(v):
      raise Refusal(f"cannot iterate over {kind_name(v)} `{snippet(node)}`", node)
    raise Refusal(f"cannot iterate over `{snippet(node)}`", node)
