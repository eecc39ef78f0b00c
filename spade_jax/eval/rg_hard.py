"""Reasoning-Gym's hard split as an evaluation suite, reported in four buckets.

The 100 datasets of the Reasoning-Gym paper's hard evaluation (`eval.rg_hard_configs`), each
built as ``reasoning_gym.create_dataset(task, size=items_per_task, seed=seed, **hard params)``;
its first ``items_per_task`` entries are the suite's prompts ``rg:<task>-hard/<i>``, grouped
by bucket (math / algorithmic / cognition / logic). Defaults follow the paper's evaluation
harness (its gem evaluator with the ``rg:<task>-hard`` environments and ``_games_gem.yaml``): 8
episodes per task, dataset seed 42, temperature 0.6, top-p 0.8, top-k 20, 8192 new tokens.
(That harness drew each episode's entry at random from a 500-entry dataset; here the entries
are fixed, so runs pair up item by item.)

What the model sees is what that harness sends, one user message and no system prompt: the
environment's observation is the question followed by ``Put your final answer within
\\boxed{}.``, and the first message wraps it in Reasoning-Gym's own "default" prompt, which asks
for ``<answer>...</answer>`` (``first_message``). Both instructions reach the model, so the grader
takes the last ``<answer>`` block and falls back to the last ``\\boxed{}``; the task's own
``score_answer`` scores it (partial credit is the task's rule; a scorer exception scores 0, and
so does a response with neither, where that harness handed the scorer None and three tasks
give 0.01). An episode is one assistant turn. Its reward, the suite's score, is the paper's
**win**: 1 when the task's scorer gives full marks (``>= 1``), else 0, as that harness's
``win_rate`` columns count it; the scorer's own (possibly partial) score is kept in
``info["eval"]["score"]``.
"""

from __future__ import annotations

import functools
import json
import re
from collections import deque
from typing import Any

from spade_jax.eval.rg_hard_configs import BUCKET_CATEGORIES, HARD_PARAMS
from spade_jax.eval.suite import Policy, Prompt, Sampling
from spade_jax.spade.heldout import last_boxed

SEED = 42
ITEMS_PER_TASK = 8
BUCKETS = tuple(BUCKET_CATEGORIES)
TASK_PARAMS: dict[str, dict[str, Any]] = {
  task: params for tasks in HARD_PARAMS.values() for task, params in tasks.items()
}
TASK_BUCKET: dict[str, str] = {
  task: bucket
  for bucket, categories in BUCKET_CATEGORIES.items()
  for category in categories
  for task in HARD_PARAMS[category]
}
TASKS = tuple(TASK_PARAMS)

OBS_SUFFIX = "\n\nPut your final answer within \\boxed{}."
PROMPT_HEAD = (
  "Given a problem, your task is to answer the question by thinking step-by-step in a clear "
  "and specific manner.\nProblem: "
)
PROMPT_TAIL = (
  "\nOnce you have thought about the reasoning process, provide the answer in the following "
  "format:\n<answer>answer here</answer>\nDo not explain your reasoning inside the answer tags, "
  "provide only the final answer. When an example is provided, you should strictly follow the "
  "format of the output/answer in that example."
)
ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)


def extract_answer(text: str) -> str | None:
  """The content of the last ``<answer>...</answer>`` (stripped), else of the last
  ``\\boxed{}``, else None."""
  found = ANSWER_TAG.findall(text)
  if found:
    return found[-1].strip()
  return last_boxed(text)


def score_answer(dataset: Any, answer: str | None, entry: dict) -> float:
  """``dataset``'s own score of ``answer`` for ``entry``; 0 for no answer or a scorer error."""
  if answer is None:
    return 0.0
  try:
    return float(dataset.score_answer(answer, entry))
  except Exception:  # a scorer that chokes on a malformed answer counts it wrong
    return 0.0


@functools.cache
def build_dataset(task: str, size: int, seed: int) -> Any:
  """``task``'s hard-split dataset (cached per process: scorers and entries are pure)."""
  import reasoning_gym

  return reasoning_gym.create_dataset(task, size=size, seed=seed, **TASK_PARAMS[task])


def unavailable() -> dict[str, str]:
  """The hard-split tasks this installation cannot build (task -> why): constructing the
  dataset or generating its first entry failed (a missing data file, a network fetch...)."""
  return dict(build_failures())


@functools.cache
def build_failures() -> tuple[tuple[str, str], ...]:
  """``unavailable()``, measured once per process."""
  out = []
  for task in TASKS:
    try:
      build_dataset(task, ITEMS_PER_TASK, SEED)[0]  # the default suite's dataset
    except Exception as e:  # any failure to build offline is reported, never hidden
      out.append((task, f"{type(e).__name__}: {e}"))
  return tuple(out)


def rubiks_cube_solution(scramble: str) -> str:
  """The scramble undone, in moves ``RubiksCubeDataset.score_answer`` applies: its move parser
  drops tokens that start with a layer digit, so ``1Lw`` (a one-layer wide turn) becomes ``L``
  and the inner slice ``2L`` becomes ``Lw L'``."""
  out: list[str] = []
  for token in reversed(scramble.split()):
    m = re.fullmatch(r"(\d*)([LRDUBF])(w?)('?)(\d*)", token)
    if m is None:
      raise ValueError(f"unsupported scramble move {token!r}")
    layer, face, wide, prime, count = m.groups()
    turn, back = ("", "'") if prime else ("'", "")
    if (wide and layer in ("", "2")) or (not wide and layer == "2"):
      moves = [f"{face}w{turn}"] + ([] if wide else [f"{face}{back}"])
    elif layer in ("", "1"):
      moves = [f"{face}{turn}"]
    else:
      raise ValueError(f"unsupported scramble move {token!r}")
    out.extend(moves * int(count or 1))
  return " ".join(out)


def rush_hour_solution(board_config: str) -> str:
  """A shortest move list (``"F+1 K-2 ..."``) that frees the red car, by breadth-first search
  over the board as the question shows it (its letters are the ones the scorer reads)."""
  from reasoning_gym.games.rush_hour import Board

  rows = Board(board_config).board_str().split("\n")[:6]
  cells: dict[str, list[tuple[int, int]]] = {}
  walls = set()
  for r, row in enumerate(rows):
    for c, ch in enumerate(row):
      if ch == "x":
        walls.add((r, c))
      elif ch != ".":
        cells.setdefault(ch, []).append((r, c))
  names = sorted(cells)
  # per piece: horizontal?, fixed coordinate, length; the state is each piece's moving coordinate
  shape = []
  for n in names:
    horizontal = len({r for r, _ in cells[n]}) == 1
    fixed = cells[n][0][0] if horizontal else cells[n][0][1]
    shape.append((horizontal, fixed, len(cells[n])))
  start = tuple(min(c if h else r for r, c in cells[n]) for n, (h, _, _) in zip(names, shape))

  def occupied(state, skip):
    out = set(walls)
    for k, (h, f, length) in enumerate(shape):
      if k != skip:
        out.update(((f, state[k] + i) if h else (state[k] + i, f)) for i in range(length))
    return out

  red = names.index("A")
  parent: dict[tuple, tuple | None] = {start: None}
  queue = deque([start])
  while queue:
    state = queue.popleft()
    if state[red] == 4:
      moves = []
      while parent[state] is not None:
        prev, k, d = parent[state]
        moves.append(f"{names[k]}{'+' if d > 0 else '-'}{abs(d)}")
        state = prev
      return " ".join(reversed(moves))
    for k, (h, f, length) in enumerate(shape):
      taken = occupied(state, k)
      for step in (-1, 1):
        d = step
        while True:
          pos = state[k] + d
          span = [(f, pos + i) if h else (pos + i, f) for i in range(length)]
          if pos < 0 or pos + length > 6 or any(cell in taken for cell in span):
            break
          nxt = state[:k] + (pos,) + state[k + 1 :]
          if nxt not in parent:
            parent[nxt] = (state, k, d)
            queue.append(nxt)
          d += step
  raise ValueError("unsolvable rush hour board")


def known_answer(task: str, entry: dict) -> str:
  """An answer the task's scorer accepts: the entry's own answer, or, for the tasks that store
  none (several solutions exist), one built from the entry's metadata."""
  if entry["answer"] is not None:
    return str(entry["answer"])
  meta = entry["metadata"]
  if task == "graph_color":
    return json.dumps(meta["possible_answer"])
  if task == "propositional_logic":
    return meta["example_answer"]
  if task == "rubiks_cube":
    return rubiks_cube_solution(meta["scramble_moves"])
  if task == "rush_hour":
    return rush_hour_solution(meta["board_config"])
  raise ValueError(f"{task}: entry has no known answer")


class RgHardEnv:
  """One single-turn episode of one entry: the first answer is graded and ends it."""

  def __init__(self, dataset: Any, entry: dict):
    self.dataset = dataset
    self.entry = entry

  def reset(self, seed: int | None = None) -> tuple[str, dict]:
    return self.entry["question"] + OBS_SUFFIX, {}

  def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
    answer = extract_answer(action)
    score = score_answer(self.dataset, answer, self.entry)
    solved = score >= 1.0 - 1e-9
    info = {"eval": {"answer": answer, "score": score, "solved": solved}}
    return "", float(solved), True, False, info


class RgHardSuite:
  """The Reasoning-Gym hard split (module docstring)."""

  name = "rg_hard"
  framing = "chat"
  system = None
  max_turns = 1  # the harness allowed 2, but the environment ends after the first answer
  max_new_tokens = 8192
  metric = "win_rate"
  sampling = Sampling(temperature=0.6, top_p=0.8, top_k=20)
  categories = BUCKETS

  def __init__(
    self,
    tasks: tuple[str, ...] | list[str] | None = None,
    items_per_task: int = ITEMS_PER_TASK,
    seed: int = SEED,
  ):
    if items_per_task <= 0:
      raise ValueError("items_per_task must be positive")
    missing = unavailable()
    if tasks is None:
      tasks = tuple(t for t in TASKS if t not in missing)
    unknown = [t for t in tasks if t not in TASK_PARAMS]
    if unknown:
      raise ValueError(f"unknown rg_hard task(s) {unknown}; known: {list(TASKS)}")
    blocked = {t: missing[t] for t in tasks if t in missing}
    if blocked:
      raise ValueError(f"rg_hard task(s) unavailable here: {blocked}")
    self.tasks = tuple(tasks)
    self.items_per_task = items_per_task
    self.seed = seed
    self.unavailable = missing  # left out of the default task list, and why
    self._prompts: list[Prompt] | None = None
    self._entries: dict[tuple[str, int], dict] = {}

  def dataset(self, task: str) -> Any:
    return build_dataset(task, self.items_per_task, self.seed)

  def prompts(self) -> list[Prompt]:
    """Item 0 of every task, then item 1, ...: a per-bucket ``limit`` spreads over tasks."""
    if self._prompts is None:  # entries are generated when first used (`entry`)
      self._prompts = [
        Prompt(f"rg:{task}-hard/{i}", TASK_BUCKET[task], seed=i, data=i)
        for i in range(self.items_per_task)
        for task in self.tasks
      ]
    return self._prompts

  def entry(self, prompt: Prompt) -> dict:
    """The reasoning_gym entry of ``prompt`` (generated once)."""
    key = (self.task_of(prompt), prompt.data)
    if key not in self._entries:
      self._entries[key] = self.dataset(key[0])[key[1]]
    return self._entries[key]

  @staticmethod
  def task_of(prompt: Prompt) -> str:
    return prompt.id.removeprefix("rg:").rsplit("-hard/", 1)[0]

  def make_env(self, prompt: Prompt) -> RgHardEnv:
    return RgHardEnv(self.dataset(self.task_of(prompt)), self.entry(prompt))

  def first_message(self, prompt: Prompt, obs: str) -> str:
    return PROMPT_HEAD + obs + PROMPT_TAIL

  def oracle(self, prompt: Prompt) -> Policy:
    reply = f"<answer>{known_answer(self.task_of(prompt), self.entry(prompt))}</answer>"
    return lambda obs, info: reply
