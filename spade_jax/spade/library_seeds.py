"""The library environments as designer seeds: the games' Python twins and the tool library,
without the held-out ones, as `EnvMemory` seeds for the designer's first prompts."""

from __future__ import annotations

import dataclasses

from spade_jax.spade.memory import EnvMemory


@dataclasses.dataclass(frozen=True)
class LibraryEntry:
  """One library environment as the seed pool uses it."""

  name: str
  skill: str
  source: str
  class_name: str


def seed_memory(memory: EnvMemory, kind: str) -> int:
  """Adds the library environments of ``kind`` ("game" or "tool", `library_entries`) to
  ``memory`` as library seeds (origin "library"); returns how many."""
  entries = library_entries(kind)
  for e in entries:
    memory.add_seed(e.source, e.skill, name=e.name)
  return len(entries)


def library_entries(kind: str) -> list[LibraryEntry]:
  """The library environments of a kind that may be training environments: the games' Python
  twins, or the tool library, without the held-out ones (`HELDOUT_FAMILIES`,
  `HELDOUT_TOOL_ENVS`: the held-out evaluation's)."""
  if kind == "tool":
    from spade_jax.envs.library.tool_library import HELDOUT_TOOL_ENVS, TOOL_ENVS

    return [
      LibraryEntry(e.name, e.skill, e.source, e.class_name)
      for e in TOOL_ENVS.values()
      if e.name not in HELDOUT_TOOL_ENVS
    ]
  from spade_jax.envs.library import FAMILIES, HELDOUT_FAMILIES

  return [
    LibraryEntry(f.name, f.skill, f.twin_source(), f.twin.__name__)
    for f in FAMILIES.values()
    if f.name not in HELDOUT_FAMILIES
  ]
