"""The loop's per-iteration counters (spade.observe) and the designer's "copy" stage."""

import numpy as np

from spade_jax.envs.sandbox.validate import STAGES, ValidatorConfig
from spade_jax.spade import observe
from spade_jax.spade.designer import Designer, DesignerConfig
from spade_jax.spade.library_seeds import library_entries, seed_memory
from spade_jax.spade.memory import EnvMemory
from spade_jax.spade.window import empty_window


def test_stage_metrics_list_every_stage():
  assert observe.DESIGNER_STAGES[:2] == ("extract", "copy")
  assert set(observe.DESIGNER_STAGES) == {*STAGES, "copy"}
  m = observe.stage_metrics({"static": 2, "ok": 1, "copy": 1})
  assert m["designer/stage/static"] == 2.0 and m["designer/passed"] == m["designer/stage/ok"] == 1
  assert m["designer/stage/leak"] == 0.0 and m["designer/stage/copy"] == 1.0
  assert len([k for k in m if k.startswith("designer/stage/")]) == len(observe.DESIGNER_STAGES) + 1


def test_short_refusal_reasons():
  s = observe.short_reason
  assert s("line 12: call `foo(x, y)` is outside the translatable subset") == (
    "call_is_outside_the_translatable"
  )
  assert s("differential check failed: seed 3 step 1 differs") == "differential_check_failed"
  assert s("") == "unknown"
  m = observe.refusal_metrics(["translator failed: boom", "translator failed: bang", "line 1: x"])
  assert m == {"designer/refusal/translator_failed": 2.0, "designer/refusal/x": 1.0}


def test_solve_and_regret_by_source():
  returns = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]], np.float32)
  valid = np.array([[True, True], [True, True], [False, False]])
  out = observe.solve_by_source(returns, valid, [0.0, 2.0, -1.0])
  assert out == {"agent/solve_rate/new": 0.5, "agent/solve_rate/library": 1.0}
  w = empty_window(1, 3, 2, 2)
  w.returns_WGP[0], w.valid_WGP[0] = returns, valid
  w.hint_returns_GH[:] = [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
  w.hint_valid_GH[:] = True
  out = observe.regret_by_source(w, [0.0, 2.0, -1.0])  # slot 2 never played unhinted
  assert out == {
    "designer/regret/new": 0.5,
    "designer/regret_games/new": 1.0,
    "designer/regret/library": 0.0,
    "designer/regret_games/library": 1.0,
  }
  merged = observe.merge_by_source(
    [out, {"designer/regret/new": 0.0, "designer/regret_games/new": 3.0}]
  )
  assert merged["designer/regret/new"] == 0.125 and merged["designer/regret_games/new"] == 4.0


def test_verbatim_seed_copy_is_rejected_at_copy(tmp_path):
  designer = Designer(None, None, DesignerConfig(), ValidatorConfig(), tmp_path)
  mem = EnvMemory()
  seed_memory(mem, "game")
  source = library_entries("game")[3].source
  text = "Here it is:\n```python\n" + source.replace("\n", "\n\n") + "```\n"
  report = designer._copy_report(text, mem)
  assert report.stage == "copy" and not report.valid
  assert library_entries("game")[3].name in report.reason
  changed = source.replace("Env", "NewEnv", 1)
  assert designer._copy_report(f"```python\n{changed}```", mem) is None
  assert designer._copy_report(text, EnvMemory()) is None  # no seeds, no copy check
