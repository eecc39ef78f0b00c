"""Translator: calls into ``random`` (draws in the tape format of `ir/draws.py`), ``re`` (answer
parsing: `answers.py`) and ``math``."""

from __future__ import annotations

import ast

from spade_jax.envs.translate.answers import (
  BOX,
  approximate_grammar,
  grammar_of,
  is_box_pattern,
  list_groups,
)
from spade_jax.envs.translate.kinds import (
  ActionText,
  Group,
  Int,
  It,
  Lst,
  Match,
  Pattern,
  Range,
  Rng,
  Seed,
)
from spade_jax.envs.translate.refusal import Refusal, snippet
from spade_jax.envs.translate.texts import Text


def random_call(v, name, args, kwargs, node):
  e = v.e
  if kwargs:
    raise Refusal(f"`{snippet(node)}`: keyword arguments to random", node)
  if name == "seed":
    seed_only(args, node)
    return None
  if name == "randint" and len(args) == 2:
    r = e.temp()
    e.emit(
      "rand", r, v.operand(v.as_int(args[0], node), node), v.operand(v.as_int(args[1], node), node)
    )
    return Int(r)
  if name == "randrange" and len(args) in (1, 2):
    lo, hi = (0, args[0]) if len(args) == 1 else args
    top = v.binop(ast.Sub, hi, 1, node)
    r = e.temp()
    e.emit("rand", r, v.operand(v.as_int(lo, node), node), v.operand(v.as_int(top, node), node))
    return Int(r)
  if name == "choice" and len(args) == 1 and isinstance(args[0], Range):
    rg = args[0]
    n = v.length_of(It(("range", rg.lo, rg.hi, rg.step)))
    r = e.temp()
    e.emit("rand", r, 0, v.operand(v.binop(ast.Sub, n, 1, node), node))  # the index, as Python
    x = v.binop(ast.Mult, Int(r), rg.step, node)
    return v.binop(ast.Add, x, rg.lo, node)
  if name == "choice" and len(args) == 1:
    seq = v.read_var(args[0])
    if isinstance(seq, str):
      seq = tuple(seq)
    if isinstance(seq, tuple) and seq:  # the drawn index, as Python records it
      r = e.temp()
      e.emit("rand", r, 0, len(seq) - 1)
      if all(isinstance(x, str) for x in seq):
        return Text([(x,) if x else () for x in seq], r)
      if all(isinstance(x, tuple) for x in seq):
        return tuple(pick(v, r, [s[k] for s in seq], node) for k in range(len(seq[0])))
      if all(isinstance(x, int) for x in seq):
        return v.const_get(seq, Int(r), node)
    lst = v.as_list(seq, node)
    r = e.temp()
    e.emit("choice", r, lst.reg)
    return Int(r)
  if name == "sample" and len(args) == 2:
    pop = v.read_var(args[0])
    if isinstance(pop, Range):
      if pop.step != 1:
        raise Refusal(f"`{snippet(node)}`: sample of a stepped range", node)
      r = e.temp_list()
      e.emit(
        "rsample", r, v.operand(pop.lo, node), v.operand(pop.hi, node),
        v.operand(v.as_int(args[1], node), node),
      )  # fmt: skip
      return Lst(r, args[1] if isinstance(args[1], int) else None)
    lst = v.as_list(args[0], node)
    r = e.temp_list()
    e.emit("sample", r, lst.reg, v.operand(v.as_int(args[1], node), node))
    return Lst(r, args[1] if isinstance(args[1], int) else None)
  if name == "shuffle" and len(args) == 1:
    if not isinstance(v.read_var(args[0]), Lst):
      raise Refusal(
        f"`{snippet(node)}`: shuffle of a constant list (in Python the shuffle would carry over "
        "to later episodes; shuffle a copy made in this method)",
        node,
      )
    lst = v.as_list(args[0], node)
    e.emit("shuffle", lst.reg, lst.reg)
    return None
  raise Refusal(f"random.{name} is outside the translatable subset", node)


def seed_only(args, node) -> None:
  """The interpreter draws its own values per episode; Python may only be seeded by reset's
  seed argument (a constant seed would make every Python episode the same task)."""
  if args and not isinstance(args[0], Seed):
    raise Refusal(f"`{snippet(node)}`: seed only with reset()'s seed argument", node)


def pick(v, idx, options, node):
  if all(isinstance(x, str) for x in options):
    return Text([(x,) if x else () for x in options], idx)
  if all(isinstance(x, int) for x in options):
    return v.const_get(tuple(options), Int(idx), node)
  raise Refusal(f"`{snippet(node)}`: random choice among mixed tuples", node)


def re_call(v, name, args, node):
  if name == "compile" and len(args) == 1 and isinstance(args[0], str):
    return Pattern(args[0])
  if name not in ("search", "findall", "match", "fullmatch") or len(args) != 2:
    raise Refusal(f"`re.{name}` is outside the translatable subset", node)
  pattern, text = args
  if isinstance(pattern, Pattern):
    pattern = pattern.text
  if name == "fullmatch" and isinstance(text, Group) and text.grammar == BOX:
    if isinstance(pattern, str) and grammar_of(r"\\boxed\{(" + pattern + r")\}") in (1, 3):
      v.env.regex = True  # "is the box's content an int": what int() accepts (approximately)
      return Match(BOX, False, test="nguess")
  if not isinstance(text, ActionText):
    raise Refusal(f"`{snippet(node)}`: regular expressions only parse the step's action", node)
  if name in ("match", "fullmatch"):
    raise Refusal(f"`re.{name}` on the action (only search / findall of a \\boxed{{}})", node)
  if isinstance(pattern, str) and is_box_pattern(pattern):
    v.env.regex = True
    return Match(BOX, name == "findall")
  g = grammar_of(pattern) if isinstance(pattern, str) else None
  k = list_groups(pattern) if g is None else None
  v.env.regex = True
  if k is not None:
    v.env.use_grammar(0, True, node)
    return Match(0, name == "findall", k)
  if g is None:
    approx = approximate_grammar(pattern) if isinstance(pattern, str) else None
    if approx is None:
      raise Refusal(
        f"regular expression {pattern!r} is not a recognised \\boxed{{}} single-int answer", node
      )
    g, lo, hi = approx
    return Match(g, name == "findall", 1, lo, hi)
  return Match(g, name == "findall")


def module_call(v, module, name, args, kwargs, node):
  if module == "random":
    if name == "Random":
      seed_only(args, node)
      return Rng()
    return random_call(v, name, args, kwargs, node)
  if module == "re":
    return re_call(v, name, args, node)
  if module == "math":
    if name == "gcd" and len(args) == 2:
      r = v.e.temp()
      v.e.emit(
        "gcd", r, v.operand(v.as_int(args[0], node), node), v.operand(v.as_int(args[1], node), node)
      )
      return Int(r)
    if name in ("floor", "ceil", "trunc") and len(args) == 1 and isinstance(args[0], Int):
      return args[0]
    if name == "isqrt" and len(args) == 1:
      return isqrt(v, args[0], node)
  raise Refusal(f"`{module}.{name}` is outside the translatable subset", node)


def isqrt(v, x, node):
  e = v.e
  r = e.local()
  e.emit("set", r, 0)
  t = e.temp()
  top, end = e.new_label(), e.new_label()
  xv = v.operand(v.as_int(x, node), node)
  e.place(top)
  e.emit("add", t, r, 1)
  e.emit("mul", t, t, t)
  e.emit("le", t, t, xv)
  e.emit("jz", t, end)
  e.emit("add", r, r, 1)
  e.emit("jmp", top)
  e.place(end)
  return Int(r)
