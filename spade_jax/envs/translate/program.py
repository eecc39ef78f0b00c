"""Translator: the environment class as a whole -> assembly text (`lower_source`).

Order: module and class (`Lowerer.load_module`), ``__init__`` with the constructor arguments
(constant attributes), the turn counter, ``reset`` + ``solution()`` (the answer), the *homes*
(registers that carry ``self.x`` from ``reset`` into ``step`` and between steps), ``step``
(iterated until the ranges of changing attributes are stable over the episode's turns),
the truncation proof, cases, register allocation, text.
"""

from __future__ import annotations

import ast
import dataclasses

from spade_jax.envs.ir.program import ProgramConfig
from spade_jax.envs.translate.calls import MUTATORS
from spade_jax.envs.translate.ir import (
  Code,
  Section,
  allocate,
  operand,
  section_text,
  template_text,
)
from spade_jax.envs.translate.module import Frame
from spade_jax.envs.translate.step import Home, StepLowering
from spade_jax.envs.translate.values import (
  Choice,
  Function,
  Int,
  Lst,
  Refusal,
  Rng,
  Seed,
  SelfRef,
  Text,
  VReg,
  const_int,
  is_const,
)


@dataclasses.dataclass
class Lowered:
  text: str  # assembly
  max_turns: int
  answer_parse: set
  n_cases: int


def _self_attrs(fdef):
  """(reads, writes, called methods) of ``self.x`` in a method."""
  reads, writes, calls = set(), set(), set()
  for n in ast.walk(fdef):
    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
      (writes if isinstance(n.ctx, ast.Store) else reads).add(n.attr)
    if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Attribute):
      reads.add(n.target.attr)
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
      f = n.func
      if isinstance(f.value, ast.Name) and f.value.id == "self":
        calls.add(f.attr)
      base = f.value
      if f.attr in MUTATORS and isinstance(base, ast.Attribute) and _is_self(base.value):
        writes.add(base.attr)
      if f.attr == "shuffle" and n.args and isinstance(n.args[0], ast.Attribute):
        if _is_self(n.args[0].value):
          writes.add(n.args[0].attr)
    if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
      if isinstance(n.value, ast.Attribute) and _is_self(n.value.value):
        writes.add(n.value.attr)
  return reads, writes, calls


def _is_self(node) -> bool:
  return isinstance(node, ast.Name) and node.id == "self"


class EnvLowering(StepLowering):
  def run(self) -> Lowered:
    cls = self.load_module()
    self.frames = [Frame("module", [{}])]
    for n in cls.body:
      if isinstance(n, ast.FunctionDef):
        if n.decorator_list:
          raise Refusal(f"decorator on method {n.name} is outside the translatable subset", n)
        self.methods[n.name] = n
      elif isinstance(n, ast.Assign | ast.AnnAssign):
        self.stmt(n)
        self.class_consts.update(self.frame.scopes[0])
      elif not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) and not isinstance(
        n, ast.Pass
      ):
        raise Refusal(f"class-level `{ast.unparse(n)[:60]}` is outside the translatable subset", n)
    for name in ("reset", "step", "solution"):
      if name not in self.methods:
        raise Refusal(f"class {cls.name} has no method {name}()", cls)
    self.uses = {name: _self_attrs(f) for name, f in self.methods.items()}
    self.run_init()
    self.find_counter()
    obs, answer = self.lower_reset()
    reset_sec = Section(self.code, [_items(obs)], {})
    homes, entry = self.make_homes(answer, reset_sec)
    cases, step_sec, max_turns = self.lower_step_fixpoint(homes, entry)
    for kind, limit in (("int", self.cfg.n_regs), ("list", self.cfg.n_lists)):
      n = sum(h.kind == kind for h in homes)
      if n > limit:
        what = "registers" if kind == "int" else "list registers"
        raise Refusal(f"{n} values kept from reset() to step() need more than {limit} {what}")
    pinned = {h.reg: i for i, h in enumerate(x for x in homes if x.kind == "int")}
    pinned.update({h.reg: i for i, h in enumerate(x for x in homes if x.kind == "list")})
    phys_r = allocate(reset_sec, pinned, self.cfg, "reset()")
    phys_s = allocate(step_sec, pinned, self.cfg, "step()")
    lines = [f"turns {max_turns}"]
    lines += [f"table t{i} " + " ".join(map(str, t)) for i, t in enumerate(self.tables.values)]
    for sec, phys, name, limit in (
      (reset_sec, phys_r, "reset", self.cfg.n_reset),
      (step_sec, phys_s, "step", self.cfg.n_step),
    ):
      code = section_text(sec, phys, name, name == "reset")
      if len(code) - 1 > limit:
        raise Refusal(
          f"{name}() needs {len(code) - 1} instructions; the interpreter allows {limit}",
          self.methods[name],
        )
      lines += code
    lines.append(f"answer {operand(self.answer_home.reg, pinned)}")
    lines.append("obs " + (template_text(reset_sec.templates[0], phys_r) or '""'))
    for (_, milli, stop, _), pred, items in zip(cases, step_sec.preds, step_sec.templates):
      p = operand(pred, phys_s) if pred is not None else "1"
      words = template_text(items, phys_s) or '""'
      lines.append(f"case {p} {milli} {'stop' if stop else 'go'} {words}")
    return Lowered("\n".join(lines) + "\n", max_turns, set(self.answer_parse), len(cases))

  # -------------------------------------------------------------------------- __init__
  def run_init(self):
    fdef = self.methods.get("__init__")
    self.code, self.attrs = None, {}
    self.frames = [Frame("init", [{}])]
    if fdef is None:
      if self.kwargs:
        raise Refusal(f"constructor arguments {sorted(self.kwargs)} but no __init__")
    else:
      scope = self.bind_params(fdef, [SelfRef()], self.kwargs, fdef)
      self.frames = [Frame("init", [scope])]
      self.block(fdef.body)
    written = set().union(*(u[1] for n, u in self.uses.items() if n != "__init__"))
    self.static = {}
    for k, v in self.attrs.items():
      if k in written:
        continue
      if not (is_const(v) or isinstance(v, Rng)):
        raise Refusal(f"`self.{k}` set in __init__ is not a constant")
      self.static[k] = v

  def find_counter(self):
    """The turn counter: ``self.X = 0`` at the top of reset, ``self.X += 1`` first in step."""
    zero = set()
    for s in self.methods["reset"].body:
      if isinstance(s, ast.Assign):
        for t in s.targets:
          pairs = [(t, s.value)]
          if isinstance(t, ast.Tuple) and isinstance(s.value, ast.Tuple):
            pairs = list(zip(t.elts, s.value.elts))
          for a, v in pairs:
            if isinstance(a, ast.Attribute) and _is_self(a.value):
              if isinstance(v, ast.Constant) and v.value == 0 and type(v.value) is int:
                zero.add(a.attr)
    others = set().union(
      *(u[1] for n, u in self.uses.items() if n not in ("__init__", "reset", "step"))
    )
    pending, returned = zero - others, False
    for s in self.methods["step"].body:
      mentioned = {
        n.attr
        for n in ast.walk(s)
        if isinstance(n, ast.Attribute) and _is_self(n.value) and n.attr in pending
      }
      for x in mentioned:
        stores = [
          n
          for n in ast.walk(self.methods["step"])
          if isinstance(n, ast.Attribute)
          and _is_self(n.value)
          and n.attr == x
          and isinstance(n.ctx, ast.Store)
        ]
        if (
          not returned
          and isinstance(s, ast.AugAssign)
          and isinstance(s.op, ast.Add)
          and isinstance(s.target, ast.Attribute)
          and s.target.attr == x
          and isinstance(s.value, ast.Constant)
          and s.value.value == 1
          and len(stores) == 1
        ):
          self.counter = x
          return
      pending -= mentioned
      returned = returned or any(isinstance(n, ast.Return) for n in ast.walk(s))

  # ----------------------------------------------------------------------------- reset
  def lower_reset(self):
    self.code, self.attrs = Code(self.tables), dict(self.static)
    fdef = self.methods["reset"]
    self.frames = [Frame("init", [{}])]
    scope = self.bind_params(fdef, [SelfRef(), Seed()], {}, fdef)
    self.frames = [Frame("reset", [scope])]
    self.cond, self.facts, self.returns = None, {}, []
    if not self.block(fdef.body):
      raise Refusal("reset() may reach its end without returning", fdef)
    obs = self.frame.ret
    sol = self.methods["solution"]
    call = ast.Call(ast.Name("solution", ast.Load()), [], [], lineno=sol.lineno, col_offset=0)
    self.no_draws, self.last_return = "solution()", sol
    text = self.inline(Function(sol, True), call)
    self.no_draws = None
    changed = self.step_writes()
    read = self.uses["solution"][0]
    if read & changed:
      raise Refusal(f"solution() reads {sorted(read & changed)}, which step() changes", sol)
    return obs, self.answer_value(text, getattr(self, "last_return", sol))

  def answer_value(self, text, node):
    """solution()'s text -> ("int", value) or ("list", Lst)."""
    text = self.to_text(text, node)
    items = list(text.items) if isinstance(text, Text) else [text]
    if items and isinstance(items[0], str) and items[0].lstrip().startswith("\\boxed{"):
      if isinstance(items[-1], str) and items[-1].rstrip().endswith("}"):
        items[0] = items[0].lstrip()[len("\\boxed{") :]
        items[-1] = items[-1].rstrip()[:-1]
    items = [it for it in items if not (isinstance(it, str) and not it.strip())]
    bad = Refusal(
      "solution() must return ints: an int, or ints separated by commas, optionally in \\boxed{}",
      node,
    )
    if len(items) == 1 and isinstance(items[0], str):
      parts = items[0].replace(" ", "").split(",")
      if not all(p.lstrip("-").isdigit() for p in parts):
        raise bad
      vals = [int(p) for p in parts]
      return ("int", vals[0]) if len(vals) == 1 else ("list", self.lst_from(vals, node))
    if len(items) == 1 and isinstance(items[0], Int) and not items[0].boolean:
      return "int", items[0]
    if len(items) == 1 and isinstance(items[0], Lst):
      return "list", items[0]
    ints = items[::2]
    seps = items[1::2]
    if (
      len(items) % 2 == 1
      and all(isinstance(x, Int) and not x.boolean for x in ints)
      and all(isinstance(s, str) and s.strip() == "," for s in seps)
    ):
      return "list", self.lst_from(ints, node)
    raise bad

  def step_writes(self) -> set:
    seen, todo, out = set(), ["step"], set()
    while todo:
      m = todo.pop()
      if m in seen or m not in self.uses:
        continue
      seen.add(m)
      out |= self.uses[m][1]
      todo += list(self.uses[m][2])
    return out - {self.counter}

  def step_reads(self) -> set:
    seen, todo, out = set(), ["step"], set()
    while todo:
      m = todo.pop()
      if m in seen or m not in self.uses:
        continue
      seen.add(m)
      out |= self.uses[m][0]
      todo += list(self.uses[m][2])
    return out

  # ----------------------------------------------------------------------------- homes
  def make_homes(self, answer, reset_sec):
    homes, memo, entry = [], {}, {}

    def home(v, what):
      if id(v) in memo:
        return memo[id(v)]
      if const_int(v) or isinstance(v, Int):
        lo, hi = (int(v), int(v)) if const_int(v) else (v.lo, v.hi)
        vals = frozenset([int(v)]) if const_int(v) else v.vals
        boolean = type(v) is bool or isinstance(v, Int) and v.boolean
        h = Home(VReg("s"), VReg("s"), "int", lo, hi, vals, boolean)
        reset_sec.home_out[h.reg] = v.reg if isinstance(v, Int) else int(v)
      elif isinstance(v, Lst) and isinstance(v.length, int):
        h = Home(VReg("l"), VReg("l"), "list", v.lo, v.hi, length=v.length, mutable=v.mutable)
        reset_sec.home_out[h.reg] = self.list_reg(v, None)
      else:
        raise Refusal(f"{what} ({type(v).__name__}) cannot be kept between reset() and step()")
      homes.append(h)
      if isinstance(v, Int | Lst):  # constants are never shared: each attribute owns its home
        memo[id(v)] = h
      return h

    def carried(v, what):
      if const_int(v) or isinstance(v, Int | Lst):
        return home(v, what).value()
      if isinstance(v, Text):
        items = []
        for it in v.items:
          if isinstance(it, Choice):
            raise Refusal(f"{what}: text chosen at run time cannot be kept for step()")
          items.append(it if isinstance(it, str) else home(it, what).value())
        return Text(items)
      if isinstance(v, tuple) and not all(is_const(x) for x in v):
        return tuple(carried(x, what) for x in v)
      if is_const(v) or isinstance(v, Rng):
        return v
      return home(v, what).value()

    reads, writes = self.step_reads(), self.step_writes()
    for attr, v in self.attrs.items():
      if attr == self.counter:
        entry[attr] = "pre-increment"
      elif attr in self.static or attr not in reads:
        entry[attr] = v
      elif (is_const(v) and not isinstance(v, tuple)) and attr not in writes:
        entry[attr] = v
      else:
        entry[attr] = carried(v, f"self.{attr}")
    kind, value = answer
    self.answer_home = home(value, "the solution")
    if self.answer_home.kind != kind:
      raise Refusal("solution() mixes an int and a list")
    return homes, entry


def _items(text) -> list:
  if isinstance(text, str):
    return [text]
  return [it if isinstance(it, str) else it.reg for it in text.items]


def lower_source(source: str, cfg: ProgramConfig, kwargs: dict | None = None) -> Lowered:
  """Python environment source -> `Lowered` (assembly text); raises `Refusal`."""
  return EnvLowering(source, cfg, kwargs).run()
