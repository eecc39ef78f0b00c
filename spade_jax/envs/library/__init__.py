"""The environment library: hand-written families as assembly programs + Python twins.

Each `Family` has a program generator (difficulty parameters -> assembly text, see
`assembly.py`), its Python twin class (a standalone docs/DESIGN.md §3.6 environment in
`twins/`, taking the same keyword parameters) and a few difficulty levels, easiest first. The
twins are the reference in tests and seed examples for designer prompts.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from types import ModuleType

from spade_jax.envs.ir.assembly import assemble
from spade_jax.envs.ir.program import DEFAULT_CONFIG, EnvProgram, ProgramConfig
from spade_jax.envs.library import arithmetic, puzzles


@dataclasses.dataclass(frozen=True)
class Family:
  name: str
  skill: str
  program: Callable[..., str]  # difficulty keyword parameters -> assembly text
  levels: tuple[dict, ...]  # difficulty settings, easiest first (defaults fill the rest)

  @property
  def twin_module(self) -> ModuleType:
    return importlib.import_module(f"spade_jax.envs.library.twins.{self.name}")

  @property
  def twin(self) -> type:
    """The Python twin class (the module's one class whose name ends in ``Env``)."""
    mod = self.twin_module
    (cls,) = [c for n, c in vars(mod).items() if n.endswith("Env") and inspect.isclass(c)]
    return cls

  def twin_source(self) -> str:
    return inspect.getsource(self.twin_module)

  def build(self, tokenizer, cfg: ProgramConfig = DEFAULT_CONFIG, **params) -> EnvProgram:
    return assemble(self.program(**params), tokenizer, cfg)


MATH, LOGIC, PATTERN, OPTIMIZATION, STRATEGY = (
  "Mathematical Reasoning",
  "Logical Deduction",
  "Pattern Recognition",
  "Optimization",
  "Strategic Planning",
)

FAMILIES: dict[str, Family] = {
  f.name: f
  for f in [
    Family(
      "arith_chain",
      MATH,
      arithmetic.arith_chain,
      ({"n_terms": 2, "ops": "+"}, {"n_terms": 3}, {"n_terms": 5, "max_value": 50, "ops": "+*-*"}),
    ),
    Family(
      "modular",
      MATH,
      arithmetic.modular,
      ({"max_abs": 10, "max_mod": 5}, {}, {"max_abs": 500, "max_mod": 97}),
    ),
    Family(
      "counting",
      MATH,
      arithmetic.counting,
      ({"max_abs": 20, "max_k": 5}, {}, {"max_abs": 1000, "max_k": 37}),
    ),
    Family("digit_sum", MATH, arithmetic.digit_sum, ({"n_digits": 3}, {}, {"n_digits": 9})),
    Family(
      "gcd_lcm",
      MATH,
      arithmetic.gcd_lcm,
      ({"max_factor": 6, "max_mult": 6}, {}, {"mode": "lcm", "max_mult": 30}),
    ),
    Family(
      "weighted_sum",
      MATH,
      arithmetic.weighted_sum,
      ({"n": 2, "max_value": 9}, {}, {"n": 6, "max_weight": 20, "max_value": 99}),
    ),
    Family(
      "linear",
      MATH,
      arithmetic.linear,
      ({"max_coef": 3, "max_x": 9}, {}, {"max_coef": 30, "max_x": 200}),
    ),
    Family("sequence", PATTERN, puzzles.sequence, ({"n_shown": 6}, {}, {"order": 2, "n_shown": 5})),
    Family("missing_number", PATTERN, puzzles.missing_number, ({"n": 4}, {}, {"n": 11})),
    Family(
      "argmax",
      OPTIMIZATION,
      puzzles.argmax,
      ({"n": 4}, {}, {"n": 12, "max_value": 9, "smallest": True}),
    ),
    Family(
      "sorting",
      OPTIMIZATION,
      puzzles.sorting,
      ({"n": 3, "max_abs": 9}, {}, {"n": 10, "max_abs": 999, "descending": True}),
    ),
    Family(
      "logic",
      LOGIC,
      puzzles.logic,
      ({"connective": "and"}, {}, {"connective": "implies", "max_value": 999}),
    ),
    Family(
      "mastermind",
      LOGIC,
      puzzles.mastermind,
      ({"length": 3, "n_digits": 4}, {}, {"length": 5, "n_digits": 10, "distinct": True}),
    ),
    Family(
      "guess_number",
      STRATEGY,
      puzzles.guess_number,
      ({"high": 20, "max_turns": 6}, {}, {"low": -500, "high": 500, "max_turns": 10}),
    ),
    Family(
      "nim",
      STRATEGY,
      puzzles.nim,
      ({"max_take": 2, "max_rounds": 3}, {}, {"max_take": 9, "max_rounds": 50}),
    ),
  ]
}

# Never training environments (the Python loop's library pool, the tiny path's warm start and
# fixed pool leave them out): one family of each answer kind (a yes/no bit, a small count, an
# int list, a number-theory int), across four skills. They are the held-out evaluation's
# unseen families (`spade_jax.eval.library_suites`, `spade_jax.tiny.heldout`).
HELDOUT_FAMILIES = ("logic", "nim", "sorting", "gcd_lcm")
