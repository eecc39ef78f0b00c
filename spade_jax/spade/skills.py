"""The cognitive skill taxonomy and how skills are assigned to the games of a pool.

Every environment the designer writes targets one skill. Each regeneration epoch activates a
window of ``k`` skills that rotates through the configured skill list, and the games of the new
pool are dealt to the active skills round-robin (game ``i`` gets active skill ``i % k``), so a
pool of 24 games with ``k = 3`` has 8 games per skill.

Skills have a stable integer id: their index in :data:`TAXONOMY`. Device-side arrays (per-game
skill ids, per-skill reward trackers of shape ``[NUM_SKILLS]``) use these ids, so their shapes do
not depend on which subset a config rotates through.

Everything here is a deterministic function of ``(epoch, config)``: a resumed run re-derives the
same skills without storing them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Skill:
  """One cognitive skill: its name, what it exercises, and concepts a game could build on."""

  name: str
  description: str
  examples: tuple[str, ...]


TAXONOMY: tuple[Skill, ...] = (
  Skill(
    "Mathematical Reasoning",
    "Turning a situation into quantities and relations, then computing or proving something "
    "about them exactly; the player must carry arithmetic or algebra through several steps "
    "without losing track.",
    (
      "modular arithmetic and remainders",
      "counting arrangements with constraints",
      "solving a small system of linear equations",
      "divisibility and greatest common divisors",
      "sums of arithmetic or geometric sequences",
    ),
  ),
  Skill(
    "Logical Deduction",
    "Drawing conclusions that must follow from stated premises, eliminating possibilities "
    "until exactly one consistent assignment remains.",
    (
      "knights and knaves statements",
      "grid puzzles matching people to attributes",
      "syllogisms with quantifiers",
      "truth tables of small boolean formulas",
      "ordering people from pairwise clues",
    ),
  ),
  Skill(
    "Spatial Reasoning",
    "Keeping a mental model of positions, directions and shapes and transforming it: moves on "
    "a grid, rotations, reflections, distances and adjacency.",
    (
      "tracking a robot through turn-and-move commands",
      "Manhattan distance on a grid with walls",
      "rotating or mirroring a small pattern",
      "counting cells inside a drawn region",
      "which face of a rolled die is on top",
    ),
  ),
  Skill(
    "Pattern Recognition",
    "Finding the rule that generates observed data and using it to extend or classify new "
    "cases; the rule is hidden and must be inferred from examples.",
    (
      "next term of an integer sequence",
      "a hidden function from input-output pairs",
      "periodic repetition with an offset",
      "odd one out in a set of numbers",
      "letter shifts and substitution rules",
    ),
  ),
  Skill(
    "Optimization",
    "Choosing, among many feasible options, the one that is best under a stated objective and "
    "constraints, and knowing why no other option does better.",
    (
      "knapsack with a small number of items",
      "shortest path in a weighted graph",
      "scheduling jobs to minimise total lateness",
      "making change with the fewest coins",
      "assigning workers to tasks at least cost",
    ),
  ),
  Skill(
    "Causal Inference",
    "Working out which factors produce an effect from observations and interventions, telling "
    "causes apart from coincidences and predicting what a change will do.",
    (
      "finding the faulty component by toggling switches",
      "which ingredient triggers a reaction",
      "propagating an intervention through a dependency chain",
      "separating a confounder from a true cause",
      "diagnosing a fault from a log of events",
    ),
  ),
  Skill(
    "Strategic Planning",
    "Looking ahead over several moves, against an opponent or against the clock, to reach a "
    "goal; each decision constrains the ones that follow.",
    (
      "winning positions in a take-away game",
      "ordering actions to meet deadlines",
      "reaching a target value with limited operations",
      "planning a route that visits all checkpoints",
      "resource management over several rounds",
    ),
  ),
  Skill(
    "Memory Recall",
    "Holding information shown earlier in the episode and retrieving it precisely later, "
    "after distracting steps have intervened.",
    (
      "recalling the item at a given position of a shown list",
      "tracking balances after a series of transactions",
      "remembering which boxes hold which objects after swaps",
      "reconstructing a sequence from revealed fragments",
      "answering questions about an earlier story",
    ),
  ),
  Skill(
    "Language Understanding",
    "Extracting precise meaning from text: references, quantities, negations and word "
    "structure, where a careless reading gives the wrong answer.",
    (
      "counting letters or vowels in words",
      "resolving who 'she' refers to in a passage",
      "anagrams and word transformations",
      "following a multi-step written instruction",
      "comparing quantities stated in words",
    ),
  ),
)

#: The tool-use setting's six skills (what a designer-written tool environment exercises).
TOOL_TAXONOMY: tuple[Skill, ...] = (
  Skill(
    "API Orchestration",
    "Chaining several tool calls that change state one after another, where each call needs the "
    "state the previous one left behind.",
    (
      "check a balance, transfer funds, then confirm the new balance",
      "find flights, book one, add the passenger, confirm the booking",
      "search the stock, reserve items, then issue the invoice",
      "open a ticket, assign it, then close it with a resolution",
    ),
  ),
  Skill(
    "Data Retrieval",
    "Discovering information through query tools first, then combining what they returned "
    "into an exact answer; no single call tells the whole story.",
    (
      "list a folder, open the right file and extract one figure",
      "look up a customer, read their orders, report the latest total",
      "query records matching a condition and compute an aggregate",
      "read current settings and report which differ from a target",
    ),
  ),
  Skill(
    "State Modification",
    "Carrying out a sequence of writes whose preconditions depend on earlier writes, so the "
    "order of operations matters and the final state is what is graded.",
    (
      "create an account, grant permissions, add it to a group",
      "build a directory tree and move files into place",
      "prepare a vehicle (doors, engine, fuel) before driving",
      "rebalance a portfolio with a series of buy and sell orders",
    ),
  ),
  Skill(
    "Error Recovery",
    "Noticing that a tool call failed or returned something unexpected, finding out why with "
    "other tools, and retrying correctly.",
    (
      "a move fails with 'not found': search for the right path and retry",
      "a payment is declined: check the limit and split the payment",
      "a booking conflicts: find a free slot and rebook",
      "a name is ambiguous: list candidates and pick by a stated rule",
    ),
  ),
  Skill(
    "Tool Selection",
    "Choosing the right tool among similar alternatives from the current state, instead of "
    "calling everything or guessing.",
    (
      "decide between create and update after checking existence",
      "pick the converter that matches a file's format",
      "use the cheap lookup when it suffices, the full search otherwise",
      "route a request to the department that owns it",
    ),
  ),
  Skill(
    "Multi-Step Workflows",
    "Following an ordered procedure of many steps where later steps use results of earlier "
    "ones, often as a series of requests from the user.",
    (
      "order processing: search, check stock, reserve, pay, notify",
      "file management: list, navigate, create, move, verify",
      "system setup: check status, configure, enable, test, log",
      "data pipeline: query, filter, transform, write, validate",
    ),
  ),
)

#: Per-skill arrays (reward trackers ``[NUM_SKILLS]``) hold either setting: a run uses the
#: games taxonomy or the tool-use one, and a tool skill's id is its index in TOOL_TAXONOMY.
NUM_SKILLS = max(len(TAXONOMY), len(TOOL_TAXONOMY))
SKILL_NAMES: tuple[str, ...] = tuple(s.name for s in TAXONOMY)
TOOL_SKILL_NAMES: tuple[str, ...] = tuple(s.name for s in TOOL_TAXONOMY)

#: The six skills of the released games recipe; the remaining three complete the taxonomy.
GAMES_SKILLS: tuple[str, ...] = SKILL_NAMES[:6]
#: The tool-use recipe rotates through all six tool-use skills.
TOOL_SKILLS: tuple[str, ...] = TOOL_SKILL_NAMES


def skill_index(name: str) -> int:
  """Stable integer id of a skill: its index in :data:`TAXONOMY`, or in
  :data:`TOOL_TAXONOMY` for a tool-use skill (the two settings never share a run)."""
  for names in (SKILL_NAMES, TOOL_SKILL_NAMES):
    if name in names:
      return names.index(name)
  known = ", ".join(SKILL_NAMES + TOOL_SKILL_NAMES)
  raise ValueError(f"unknown skill {name!r}; known skills: {known}")


def get_skill(name: str) -> Skill:
  if name in TOOL_SKILL_NAMES:
    return TOOL_TAXONOMY[TOOL_SKILL_NAMES.index(name)]
  return TAXONOMY[skill_index(name)]


@dataclasses.dataclass(frozen=True)
class SkillSchedule:
  """Which skills rotate through the pool.

  skills: names (from :data:`TAXONOMY`, or all from :data:`TOOL_TAXONOMY`) in rotation order.
  active: how many skills each regeneration epoch activates (the window size ``k``).
  """

  skills: tuple[str, ...] = GAMES_SKILLS
  active: int = 3

  def __post_init__(self):
    if not self.skills:
      raise ValueError("SkillSchedule.skills must name at least one skill")
    for name in self.skills:
      skill_index(name)
    if len(set(self.skills)) != len(self.skills):
      raise ValueError(f"SkillSchedule.skills has duplicates: {self.skills}")
    tool = [name in TOOL_SKILL_NAMES for name in self.skills]
    if any(tool) and not all(tool):
      raise ValueError("SkillSchedule.skills mixes games and tool-use skills (ids would collide)")
    if not 1 <= self.active <= len(self.skills):
      raise ValueError(
        f"SkillSchedule.active={self.active} must lie in [1, {len(self.skills)}] "
        "(the number of skills in rotation)"
      )


def active_skills(epoch: int, schedule: SkillSchedule = SkillSchedule()) -> tuple[str, ...]:
  """The ``k`` skills active in regeneration epoch ``epoch`` (0-based).

  The window advances by ``k`` positions per epoch through the cyclic skill list, so
  consecutive epochs cover different skills and every skill is active equally often over
  ``len(skills)`` epochs.
  """
  if epoch < 0:
    raise ValueError(f"epoch must be >= 0, got {epoch}")
  n, k = len(schedule.skills), schedule.active
  start = (epoch * k) % n
  return tuple(schedule.skills[(start + j) % n] for j in range(k))


def assign_skills(
  epoch: int, num_games: int, schedule: SkillSchedule = SkillSchedule()
) -> tuple[str, ...]:
  """Skill name of each of the ``num_games`` games of epoch ``epoch``: round-robin over the
  active window."""
  if num_games < 0:
    raise ValueError(f"num_games must be >= 0, got {num_games}")
  window = active_skills(epoch, schedule)
  return tuple(window[i % len(window)] for i in range(num_games))


def skill_ids(names: Sequence[str]) -> list[int]:
  """Taxonomy ids of ``names`` (for the per-game ``skill_G`` arrays of the reward code)."""
  return [skill_index(n) for n in names]
