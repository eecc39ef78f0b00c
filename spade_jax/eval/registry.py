"""The evaluation suites by name, and how to build them.

======================  ==========================================================================
``rg_hard``             Reasoning-Gym hard split in the paper's four buckets (`eval.rg_hard`)
``bfcl_v4``             BFCL-v4 multi-turn: base, miss_func, miss_param, long_context (`eval.bfcl`)
``heldout_games``       held-out library game families and levels (`eval.library_suites`)
``heldout_tools``       held-out tool-library domains (`eval.library_suites`)
``rg``                  the in-loop Reasoning-Gym check at default difficulty (`eval.rg_default`)
======================  ==========================================================================

tau2-bench and ACEBench's agent split need an LLM user simulator and cannot run offline: a suite
for them implements `eval.suite.Suite` (its environment would call the simulator from ``step``)
and registers here; none is faked.
"""

from __future__ import annotations

from collections.abc import Callable

from spade_jax.eval.suite import Suite

PAPER_SUITES = ("rg_hard", "bfcl_v4", "heldout_games", "heldout_tools")


class SuiteUnavailable(Exception):
  """A suite that cannot be built here (e.g. its benchmark package is not installed)."""


def _rg_hard(**kw) -> Suite:
  from spade_jax.eval.rg_hard import RgHardSuite

  return RgHardSuite(**kw)


def _bfcl(**kw) -> Suite:
  try:
    import bfcl_eval  # noqa: F401
  except ImportError as e:
    raise SuiteUnavailable(
      "bfcl_v4 needs bfcl-eval: pip install --no-deps bfcl-eval==2026.3.23"
    ) from e
  from spade_jax.eval.bfcl import BfclSuite

  return BfclSuite(**kw)


def _games(**kw) -> Suite:
  from spade_jax.eval.library_suites import HeldoutGamesSuite

  return HeldoutGamesSuite(**kw)


def _tools(**kw) -> Suite:
  from spade_jax.eval.library_suites import HeldoutToolsSuite

  return HeldoutToolsSuite(**kw)


def _rg(**kw) -> Suite:
  from spade_jax.eval.rg_default import RgDefaultSuite

  return RgDefaultSuite(**kw)


SUITES: dict[str, Callable[..., Suite]] = {
  "rg_hard": _rg_hard,
  "bfcl_v4": _bfcl,
  "heldout_games": _games,
  "heldout_tools": _tools,
  "rg": _rg,
}


def parse_names(text: str) -> list[str]:
  """``"a,b"`` -> names (``"paper"``: `PAPER_SUITES`); unknown names raise ValueError."""
  names: list[str] = []
  for n in (x.strip() for x in text.split(",")):
    if not n:
      continue
    for m in PAPER_SUITES if n == "paper" else (n,):
      if m not in SUITES:
        raise ValueError(f"unknown suite {m!r}; known: {', '.join(SUITES)} (or 'paper')")
      if m not in names:
        names.append(m)
  if not names:
    raise ValueError("no suite given")
  return names


def parse_selection(text: str) -> dict[str, tuple[str, ...]]:
  """``"rg_hard,bfcl_v4:multi_turn_base,bfcl_v4:multi_turn_miss_func"`` -> ``{suite name:
  categories to keep}`` (an empty tuple keeps every category); ``paper`` as in `parse_names`."""
  out: dict[str, tuple[str, ...]] = {}
  for part in (x.strip() for x in text.split(",")):
    if not part:
      continue
    name, _, cat = part.partition(":")
    for n in parse_names(name):
      if not cat:
        out[n] = ()
      elif out.get(n, None) != ():
        out[n] = out.get(n, ()) + (cat,)
  if not out:
    raise ValueError("no suite given")
  return out


def make_suite(name: str, **kw) -> Suite:
  return SUITES[name](**kw)
