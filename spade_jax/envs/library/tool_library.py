"""The tool-use environment library: hand-written `ToolEnv` sources (docs/DESIGN.md §3.7).

Each `ToolLibraryEnv` names one source file in `tools/` (a standalone sandbox module that imports
`from tool_env import ToolEnv`), its tool-use skill, a difficulty and its kind: multi-instruction
(BFCL multi-turn style: instructions revealed one at a time) and/or state-graded (no expected
answer; `goal_reached()` checks the backend state). The sources are data: the sandbox loads
`ToolLibraryEnv.source` as text; `load_local(name)` executes it in-process for trusted use
(tests, fixed baselines) with `import tool_env` bound to `spade_jax.envs.sandbox.tool_env`.
"""

from __future__ import annotations

import builtins
import dataclasses
from importlib import resources

from spade_jax.envs.sandbox import tool_env

API_ORCHESTRATION, DATA_RETRIEVAL, STATE_MODIFICATION = (
  "API Orchestration",
  "Data Retrieval",
  "State Modification",
)
ERROR_RECOVERY, TOOL_SELECTION, MULTI_STEP = (
  "Error Recovery",
  "Tool Selection",
  "Multi-Step Workflows",
)
TOOL_SKILLS = (
  API_ORCHESTRATION,
  DATA_RETRIEVAL,
  STATE_MODIFICATION,
  ERROR_RECOVERY,
  TOOL_SELECTION,
  MULTI_STEP,
)
DIFFICULTIES = ("easy", "medium", "hard")
SOURCES = "spade_jax.envs.library.tools"


@dataclasses.dataclass(frozen=True)
class ToolLibraryEnv:
  name: str  # the source file is tools/<name>.py
  skill: str  # one of TOOL_SKILLS
  difficulty: str  # one of DIFFICULTIES
  multi_instruction: bool  # reset sets `instructions`, revealed one at a time
  state_graded: bool  # expected_answer is None: only the backend state is graded
  class_name: str  # the module's one `*Env` class

  @property
  def filename(self) -> str:
    return f"{self.name}.py"

  @property
  def source(self) -> str:
    """The environment's module text, as the sandbox receives it."""
    return resources.files(SOURCES).joinpath(self.filename).read_text(encoding="utf-8")


TOOL_ENVS: dict[str, ToolLibraryEnv] = {
  e.name: e
  for e in [
    ToolLibraryEnv("inventory", DATA_RETRIEVAL, "easy", False, False, "WarehouseInventoryEnv"),
    ToolLibraryEnv("unit_tools", TOOL_SELECTION, "easy", False, False, "UnitToolsEnv"),
    ToolLibraryEnv("smart_home", STATE_MODIFICATION, "easy", True, True, "SmartHomeEnv"),
    ToolLibraryEnv("file_system", STATE_MODIFICATION, "medium", True, False, "FileSystemEnv"),
    ToolLibraryEnv("banking", API_ORCHESTRATION, "medium", True, False, "BankingEnv"),
    ToolLibraryEnv("meetings", MULTI_STEP, "hard", True, True, "MeetingsEnv"),
    ToolLibraryEnv("travel", TOOL_SELECTION, "medium", False, False, "TravelBookingEnv"),
    ToolLibraryEnv("inbox", DATA_RETRIEVAL, "medium", False, False, "InboxEnv"),
    ToolLibraryEnv("library_loans", STATE_MODIFICATION, "medium", False, True, "LibraryLoansEnv"),
    ToolLibraryEnv("restaurant", ERROR_RECOVERY, "medium", False, True, "RestaurantEnv"),
    ToolLibraryEnv("it_tickets", ERROR_RECOVERY, "hard", False, True, "HelpdeskEnv"),
    ToolLibraryEnv("records", API_ORCHESTRATION, "hard", False, False, "RecordsQueryEnv"),
    ToolLibraryEnv("vehicle", MULTI_STEP, "medium", True, False, "VehicleControlEnv"),
  ]
}

# Never training environments (left out of the tool-use loop's library pool): four domains, one
# each of Multi-Step, API Orchestration, State Modification and Error Recovery; every skill
# keeps at least one training environment. The held-out evaluation's unseen domains
# (`spade_jax.eval.library_suites`).
HELDOUT_TOOL_ENVS = ("vehicle", "records", "library_loans", "it_tickets")


def _import_tool_env(name, globals=None, locals=None, fromlist=(), level=0):
  if name == "tool_env" and level == 0:
    return tool_env
  return builtins.__import__(name, globals, locals, fromlist, level)


def load_local(name: str) -> type:
  """The environment class of `TOOL_ENVS[name]`, executed in a fresh namespace in this process.

  Trusted use only (the library's own sources): nothing is sandboxed. `import tool_env` inside
  the source resolves to `spade_jax.envs.sandbox.tool_env` through the namespace's own
  `__import__`, so `sys.modules` is left as it was."""
  entry = TOOL_ENVS[name]
  env_builtins = dict(vars(builtins))
  env_builtins["__import__"] = _import_tool_env
  namespace = {"__name__": f"tool_library_{name}", "__builtins__": env_builtins}
  exec(compile(entry.source, f"<tool_library/{entry.filename}>", "exec"), namespace)
  cls = namespace[entry.class_name]
  if not (isinstance(cls, type) and issubclass(cls, tool_env.ToolEnv)):
    raise TypeError(f"{entry.filename}: {entry.class_name} is not a ToolEnv subclass")
  return cls


def make(name: str, seed=None, **kwargs) -> tool_env.ToolEnv:
  """A fresh local instance of `TOOL_ENVS[name]`, reset with `seed` (see `load_local`)."""
  env = load_local(name)(**kwargs)
  env.reset(seed)
  return env
