"""The static (AST) policy check: what it rejects, with which reason and line, and what it allows."""

import textwrap

import pytest

from spade_jax.envs.sandbox import policy

ENV = """
import random
import re
from collections import Counter


class GoodEnv:
  def __init__(self, max_turns=10, **kw):
    self._secret = 0
    self.reset()

  def reset(self, seed=None):
    self._secret = random.Random(seed).randint(1, 9)
    return f"{type(self).__name__}: guess", {}

  def solution(self):
    return str(self._secret)

  def step(self, action):
    hit = re.search(r"\\d+", action)
    return "o", float(bool(hit)), bool(hit), False, {"c": Counter(action)}
"""


def _with(body: str, imports: str = "") -> str:
  """ENV with `body` inserted into reset() and `imports` added at the top."""
  lines = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
  src = ENV.replace(
    '    return f"{type(self).__name__}', lines + '\n    return f"{type(self).__name__}'
  )
  return imports + "\n" + src


def test_good_env_passes_and_names_its_class():
  assert policy.check_source(ENV) == (None, "GoodEnv")


@pytest.mark.parametrize(
  "body, imports, reason",
  [
    ("", "import os", "import of module 'os' is not allowed"),
    ("", "import collections.abc, pickle", "import of module 'pickle' is not allowed"),
    ("", "from os import path", "import from module 'os' is not allowed"),
    ("", "from . import sibling", "relative imports are not allowed"),
    ("", "from random import *", "'from ... import *' is not allowed"),
    ("", "from random import _inst", "importing private name '_inst' is not allowed"),
    ("x = open('f')", "", "use of 'open' is not allowed"),
    ("f = eval", "", "use of 'eval' is not allowed"),
    ("exec('1')", "", "use of 'exec' is not allowed"),
    ("g = globals()", "", "use of 'globals' is not allowed"),
    ("v = vars(self)", "", "use of 'vars' is not allowed"),
    ("x = input()", "", "use of 'input' is not allowed"),
    ("b = __builtins__", "", "use of name '__builtins__' is not allowed"),
    ("c = __loader__", "", "use of name '__loader__' is not allowed"),
    ("x = ().__class__", "", "access to attribute '__class__' is not allowed"),
    ("x = object.__subclasses__()", "", "access to attribute '__subclasses__' is not allowed"),
    ("x = self.reset.__globals__", "", "access to attribute '__globals__' is not allowed"),
    ("x = (i for i in []).gi_frame", "", "access to attribute 'gi_frame' is not allowed"),
    ("x = self.frame.f_back", "", "access to attribute 'f_back' is not allowed"),
    ("x = random._os", "", "access to private attribute '_os' of anything but self"),
    ("x = getattr(self, '__dict__')", "", "getattr() of attribute '__dict__' is not allowed"),
    ("random.randint = max", "", "modifying imported module object 'random'"),
    ("random.Random.seed = max", "", "modifying imported module object 'random'"),
    ("Counter.most_common = max", "", "modifying imported module object 'Counter'"),
    ("del re.compile", "", "modifying imported module object 're'"),
    ("s = '{0.__class__}'.format(1)", "", "format field '{0.__class__}' walks a forbidden"),
    ("s = '{x._os}'.format(x=random)", "", "format field '{x._os}' walks a forbidden"),
  ],
)
def test_rejections_name_the_construct_and_line(body, imports, reason):
  src = _with(body, imports)
  issue, cls = policy.check_source(src)
  assert cls is None
  assert issue is not None and reason in issue.reason, issue
  offending = body or imports
  assert src.splitlines()[issue.line - 1].strip().startswith(offending.split("\n")[0][:10])


@pytest.mark.parametrize(
  "body",
  [
    "self._cache = {}",  # private attributes of self
    "super().__init__()",  # the allowed dunders
    "n = type(self).__name__",
    "s = '{0.real}'.format(3)",  # non-private format fields
    "x = [i for i in range(3)]",
    "t = '{0}' + '.__class__'",  # strings that merely contain dunders
  ],
)
def test_allowed_constructs(body):
  assert policy.check_source(_with(body)) == (None, "GoodEnv")


def test_first_issue_in_source_order():
  issue, _ = policy.check_source(_with("x = ().__class__.__base__.__subclasses__()"))
  assert "'__class__'" in issue.reason


@pytest.mark.parametrize(
  "old, new, reason",
  [
    ("class GoodEnv:", "class Good:", "exactly one class whose name ends in 'Env', found none"),
    ("  def solution(self):", "  def answer(self):", "class GoodEnv has no method solution()"),
    ("def step(self, action):", "def step(self):", "must be callable as step(self, action)"),
    ("def reset(self, seed=None):", "def reset(self):", "must be callable as reset(self, seed)"),
    ("def step(self, action):", "async def step(self, action):", "step() must not be async"),
    ("def __init__(self, max_turns=10, **kw):", "def __init__(self, n):", "__init__() with no"),
    ("def step(self, action):", "def step(self, action, *, k):", "required keyword-only"),
  ],
)
def test_class_shape(old, new, reason):
  assert old in ENV
  issue, _ = policy.check_source(ENV.replace(old, new))
  assert issue is not None and reason in issue.reason, issue


def test_arity_accepts_varargs_and_inherited_methods():
  src = ENV.replace("def step(self, action):", "def step(self, *args):")
  assert policy.check_source(src)[0] is None
  base = "class Base:\n  def solution(self):\n    return '1'\n\n\n"
  inherited = base + ENV.replace("class GoodEnv:", "class GoodEnv(Base):").replace(
    "  def solution(self):\n    return str(self._secret)\n", ""
  )
  assert policy.check_source(inherited) == (None, "GoodEnv")


def test_two_env_classes_rejected():
  issue, _ = policy.check_source(ENV + "\n\nclass OtherEnv(GoodEnv):\n  pass\n")
  assert "found GoodEnv, OtherEnv" in issue.reason


def test_syntax_compile_and_size_errors():
  issue, _ = policy.check_source("def f(:\n  pass\n")
  assert issue.reason.startswith("syntax error") and issue.line == 1
  issue, _ = policy.check_source(ENV + "\nreturn 3\n")  # only the compiler rejects this
  assert "'return' outside function" in issue.reason
  issue, _ = policy.check_source("x = " + "(" * 500 + "1" + ")" * 500)
  assert "too many nested parentheses" in issue.reason
  issue, _ = policy.check_source("x = 1\n" * (policy.MAX_SOURCE_CHARS // 6 + 1))
  assert "characters (limit" in issue.reason


def test_forbidden_attribute_and_imports():
  assert policy.forbidden_attribute("__class__") and policy.forbidden_attribute("tb_frame")
  assert not policy.forbidden_attribute("__init__") and not policy.forbidden_attribute("_x")
  assert policy.import_allowed("collections.abc") and not policy.import_allowed("os.path")
