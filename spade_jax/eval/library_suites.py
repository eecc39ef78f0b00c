"""Self-written held-out suites: library environments that are never training environments.

* ``heldout_games``: the game library's Python twins (docs/DESIGN.md §3.6) of the held-out
  families (`envs.library.HELDOUT_FAMILIES`, left out of every training pool) at every
  difficulty level (category ``unseen_families``), and the training families at their hardest
  level where it differs from the twin's defaults, the setting the library pool trains on
  (category ``unseen_levels``);
* ``heldout_tools``: the tool library's held-out domains (`tool_library.HELDOUT_TOOL_ENVS`),
  one category per domain.

Prompts are fixed (environment, level, seed) triples: every sample of a prompt plays the same
instance. The agent sees what it sees in training (`spade.prompts.AGENT_SYSTEM` /
`spade.tool_prompts.TOOL_AGENT_SYSTEM`, the observation as the first message, no hint); the
score is the environment's own terminal reward clipped to [0, 1]. The oracle plays each
environment's own ``solution()`` (a game's winning action; a tool environment's agent turns,
replayed in order), so a harness that scores it below full marks is broken.
"""

from __future__ import annotations

from spade_jax.envs.library import FAMILIES, HELDOUT_FAMILIES, tool_library
from spade_jax.eval.suite import Policy, Prompt, Sampling
from spade_jax.spade.prompts import AGENT_SYSTEM
from spade_jax.spade.tool_prompts import TOOL_AGENT_SYSTEM

SEED_BASE = 9_000_000  # far from the loop's derived training seeds (documentation, not proof)


class HeldoutGamesSuite:
  name = "heldout_games"
  framing = "chat"
  system = AGENT_SYSTEM
  metric = "solve_rate"
  sampling = Sampling()

  def __init__(self, seeds_per_setting: int = 8, max_turns: int = 10, max_new_tokens: int = 512):
    self.seeds_per_setting = seeds_per_setting
    self.max_turns, self.max_new_tokens = max_turns, max_new_tokens

  def settings(self) -> list[tuple[str, int, dict, str]]:
    """``(family, level, params, category)`` of every held-out setting."""
    out = []
    for name, fam in FAMILIES.items():
      if name in HELDOUT_FAMILIES:
        out += [(name, lv, p, "unseen_families") for lv, p in enumerate(fam.levels)]
      elif fam.levels[-1]:  # the hardest level differs from the defaults the pool trains on
        out.append((name, len(fam.levels) - 1, fam.levels[-1], "unseen_levels"))
    return out

  def prompts(self) -> list[Prompt]:
    out = []
    for i in range(self.seeds_per_setting):  # interleaved: --limit keeps every setting
      for name, lv, params, cat in self.settings():
        seed = SEED_BASE + 1000 * lv + i
        out.append(Prompt(f"{name}/L{lv}/s{seed}", cat, seed, (name, params)))
    return out

  def make_env(self, prompt: Prompt):
    name, params = prompt.data
    return FAMILIES[name].twin(**params)

  def first_message(self, prompt: Prompt, obs: str) -> str:
    return obs

  def oracle(self, prompt: Prompt) -> Policy:
    env = self.make_env(prompt)
    env.reset(seed=prompt.seed)
    text = env.solution()
    return lambda obs, info: text


class HeldoutToolsSuite:
  name = "heldout_tools"
  framing = "tool"
  system = TOOL_AGENT_SYSTEM
  metric = "success"
  sampling = Sampling()

  def __init__(self, seeds_per_env: int = 16, max_turns: int = 25, max_new_tokens: int = 512):
    self.seeds_per_env = seeds_per_env
    self.max_turns, self.max_new_tokens = max_turns, max_new_tokens

  def prompts(self) -> list[Prompt]:
    return [
      Prompt(f"{name}/s{SEED_BASE + i}", name, SEED_BASE + i, name)
      for i in range(self.seeds_per_env)
      for name in tool_library.HELDOUT_TOOL_ENVS
    ]

  def make_env(self, prompt: Prompt):
    return tool_library.load_local(prompt.data)()

  def first_message(self, prompt: Prompt, obs: str) -> str:
    return obs

  def oracle(self, prompt: Prompt) -> Policy:
    env = self.make_env(prompt)
    env.reset(seed=prompt.seed)
    turns = iter(list(env.solution()))
    return lambda obs, info: next(turns, "")
