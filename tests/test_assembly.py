"""Assembly text <-> EnvProgram: round trips, a small regular vocabulary, line-numbered errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from envs_fixtures import tokenizer

from spade_jax.envs.ir.assembly import AssemblyError, assemble
from spade_jax.envs.ir.disassembly import disassemble
from spade_jax.envs.ir.program import OPS, SPECIALS, ProgramConfig
from spade_jax.envs.library import FAMILIES

GOOD = r"""# guess the number
turns 7

reset
rand r0 1 100          # the secret
step
eq r1 guess r0
lt r2 guess r0
not r3 found
ge r4 turn maxturns
answer r0
obs "Guess my number between 1 and 100. Answer as \\boxed{N}."
hint "Halve the interval."
case r1 1000 stop "Correct!"
case r4 0 go "Out of turns: it was " r0 "."
case r3 0 go "Put it in \\boxed{}."
case r2 0 go "Higher than " guess "."
case 1 0 go "Lower than " guess "."
"""


def _equal(a, b):
  return all(np.array_equal(np.asarray(getattr(a, k)), np.asarray(getattr(b, k))) for k in vars(a))


@pytest.mark.parametrize("tok_name", ["tiny", "smollm2"])
def test_round_trip(tok_name):
  tok = tokenizer(tok_name)
  p = assemble(GOOD, tok)
  text = disassemble(p, tok)
  assert _equal(assemble(text, tok), p)
  assert disassemble(assemble(text, tok), tok) == text
  # Comments, blank lines and spacing do not matter.
  noisy = "\n\n".join(
    "  " + line.replace(" ", "\t", 1) + "   # comment" for line in text.splitlines()
  )
  assert _equal(assemble(noisy, tok), p)


def test_canonical_text_uses_a_small_regular_vocabulary():
  """Every line is keyword/opcode followed by operands from a closed set of word shapes
  (what a grammar mask for a tiny designer model needs)."""
  tok = tokenizer("tiny")
  keywords = {"turns", "table", "reset", "step", "answer", "obs", "hint", "case", "stop", "go"}
  word = re.compile(r'-?[0-9]+|[rlt][0-9]+|"(?:[^"\\]|\\.)*"')
  heads = set()
  for f in FAMILIES.values():
    for lv in f.levels:
      for line in disassemble(f.build(tok, **lv), tok).splitlines():
        head, *rest = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', line)
        assert head in keywords or head in OPS, line
        heads.add(head)
        for w in rest:
          assert w in keywords or w in SPECIALS or w == "lguess" or word.fullmatch(w), (w, line)
  assert len(heads - keywords) >= 25  # the library exercises most opcodes


ERRORS = [  # (program text, line, message fragment)
  ("reset\n", 1, "expected 'turns'"),
  ("turns 0\n", 1, "out of range [1, 32]"),
  ("turns 3\nreset\nad r0 1 2\n", 3, "unknown opcode 'ad'"),
  ("turns 3\nreset\nadd r0 1\n", 3, "add takes 3 operands (DST-REG SCALAR SCALAR), got 2"),
  ("turns 3\nreset\nset r99 1\n", 3, "register r99 out of range"),
  ("turns 3\nreset\nset guess 1\n", 3, "register 'guess' is read-only"),
  ("turns 3\nreset\nadd r0 l0 1\n", 3, "expected an integer or a scalar register, got 'l0'"),
  ("turns 3\nreset\nsum r0 r1\n", 3, "expected a list register or a table, got 'r1'"),
  ("turns 3\nreset\npush lguess 1\n", 3, "'lguess' is read-only"),
  ("turns 3\nreset\nrand r0 5 3\n", 3, "rand range is empty (5 > 3)"),
  ("turns 3\nreset\nset r0 2147483648\n", 3, "out of range"),
  ('turns 3\nreset\nstep\nanswer r0\nobs "unterminated\n', 5, "unterminated string"),
  ('turns 3\nreset\nstep\nanswer r0\nobs "bad \\q"\n', 5, "bad string literal"),
  ("turns 3\nreset\nstep\nanswer r0\nobs t0\n", 5, "template items are strings or registers"),
  ("turns 3\nreset\nstep\nanswer r0\nobs\n", 5, "observation template is empty"),
  ('turns 3\nreset\nstep\nanswer r0\nobs "x"\ncase 1 2000 stop "y"\n', 6, "reward 2000"),
  ('turns 3\nreset\nstep\nanswer r0\nobs "x"\ncase 1 0 halt "y"\n', 6, "'stop', 'go' or 'trunc'"),
  ('turns 3\nreset\nstep\nanswer r0\nobs "x"\n', 5, "program ends early"),
  ("turns 3\nstep\n", 2, "expected 'table' or 'reset', got 'step'"),
  ("turns 3\ntable t0 1 2\ntable t0 3\n", 3, "table t0 defined twice"),
  ("turns 3\ntable t0 " + "1 " * 13 + "\n", 2, "a table holds 1..12 values, got 13"),
  ("turns 3\nreset\n" + "set r0 1\n" * 49, 51, "more than 48 reset instructions"),
  (
    'turns 3\nreset\nchoice r0 t1\nstep\nanswer r0\nobs "x"\ncase 1 0 go "y"\n',
    3,
    "empty random range or choice",
  ),
  ("turns 3\nreset\nstep\nanswer guess\n", 4, "answer must be a general register"),
  ('turns 3\nreset\nstep\nanswer r0\nobs "x"\n' + 'case 1 0 go "y"\n' * 9, 14, "more than 8 cases"),
]


@pytest.mark.parametrize("text,line,fragment", ERRORS)
def test_errors_name_the_line_and_the_problem(text, line, fragment):
  with pytest.raises(AssemblyError) as e:
    assemble(text, tokenizer("tiny"), ProgramConfig())  # the small straight-line machine
  msg = str(e.value)
  assert msg.startswith(f"line {line}: "), msg
  assert fragment in msg, msg
