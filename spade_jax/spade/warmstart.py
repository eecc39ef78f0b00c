"""Supervised designer warm start of the SPADE loop (issue 29; ``warm_start.steps > 0``, off by
default): before the first iteration, the policy is trained to write the setting's library
environments from the designer prompts a run starts with.

* **Examples**: every library environment that may train (`library_seeds.library_entries`: the
  game twins or the tool library, never a held-out one) and ``warm_start.variants`` difficulty
  variants of each (`difficulty_variants`: its constructor's integer defaults rescaled), each
  written as the reply the loop's designer gives (`reply_text`: the configured reply prefix, then
  the rest of the source, fenced). An example is kept only when that reply passes the designer's
  own validator as a sample would (a variant whose task became infeasible, or a twin that needs a
  module helper the reply prefix does not define, is dropped) and fits ``designer.max_new_tokens``
  (a reply the loop could never finish teaches nothing it can use).
* **Prompts**: the designer prompt of the example's skill with library seeds drawn as a run's
  first prompts draw them, from a memory holding every library environment *but the example's
  own*: the model learns to write an environment beside the ones it is shown, not to copy one.
* **Update**: the GRPO step with advantage 1 and no importance correction (one optimizer step
  per batch: ratio 1, so the gradient is the token-level cross-entropy's), its own AdamW at the
  constant ``warm_start.learning_rate``; the loop then starts with fresh optimizer moments, and
  (``train.kl_coef > 0``) the warm-started policy is the KL reference.
"""

from __future__ import annotations

import ast
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax import multihost, trajectories
from spade_jax.envs.sandbox import validate as validation
from spade_jax.rl import losses
from spade_jax.rl.optimizer import make_optimizer
from spade_jax.rl.update import make_update
from spade_jax.spade import config as spade_config
from spade_jax.spade.library_seeds import LibraryEntry, library_entries
from spade_jax.spade.memory import EnvMemory

FACTORS = (0.5, 0.75, 1.5, 2.0)  # how a variant rescales an integer default


class WarmStartError(ValueError):
  """The configuration leaves the warm start nothing to train on."""


@dataclasses.dataclass(frozen=True)
class Example:
  """One supervised designer example: a library environment (or a variant) as a reply."""

  name: str  # the library environment's name, "+k" for its k-th variant
  skill: str
  reply: str  # the whole reply text, the reply prefix included
  changes: dict  # a variant's rescaled defaults {parameter: (old, new)}; {} for the original


def int_defaults(source: str, class_name: str) -> list[tuple[str, int, int, int]]:
  """``(parameter, value, start, end)`` of every non-negative integer default of
  ``class_name.__init__`` in ``source`` (character offsets of the literal; bools excluded)."""
  tree = ast.parse(source)
  starts = np.cumsum([0] + [len(line) for line in source.splitlines(keepends=True)])
  out = []
  for node in tree.body:
    if not (isinstance(node, ast.ClassDef) and node.name == class_name):
      continue
    for fn in node.body:
      if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
        continue
      args = fn.args.args[len(fn.args.args) - len(fn.args.defaults) :] + fn.args.kwonlyargs
      defaults = list(fn.args.defaults) + list(fn.args.kw_defaults)
      for arg, d in zip(args, defaults):
        if isinstance(d, ast.Constant) and type(d.value) is int:
          line = source.splitlines(keepends=True)[d.lineno - 1]
          # ast offsets count UTF-8 bytes; the literal's line may hold other characters first
          col = len(line.encode()[: d.col_offset].decode())
          end = len(line.encode()[: d.end_col_offset].decode())
          at = int(starts[d.lineno - 1])
          out.append((arg.arg, d.value, at + col, at + end))
  return out


def difficulty_variants(
  source: str, class_name: str, n: int, seed
) -> list[tuple[str, dict[str, tuple[int, int]]]]:
  """Up to ``n`` distinct variants of an environment: a random non-empty subset of its integer
  constructor defaults (`int_defaults`), each multiplied by one of `FACTORS` (rounded, at least
  1 and never its old value). Returns ``[(source, {parameter: (old, new)})]``, unvalidated."""
  found = int_defaults(source, class_name)
  if not found or n <= 0:
    return []
  rng = np.random.default_rng(seed)
  out, seen = [], {source}
  for _ in range(20 * n):
    if len(out) == n:
      break
    k = int(rng.integers(1, len(found) + 1))
    picked = sorted(rng.choice(len(found), size=k, replace=False).tolist())
    changes, text = {}, source
    for i in reversed(picked):  # from the end, so earlier offsets stay valid
      name, old, start, end = found[i]
      new = max(1, int(round(old * float(rng.choice(FACTORS)))))
      if new == old:
        new = old + 1
      changes[name] = (old, new)
      text = text[:start] + str(new) + text[end:]
    if text not in seen:
      seen.add(text)
      out.append((text, dict(sorted(changes.items()))))
  return out


def reply_text(source: str, class_name: str, prefix: str) -> str | None:
  """The designer reply that writes ``source``: with no ``prefix`` the whole module in a
  ```python fence; with a prefix ending in ``class`` (`prompts.REPLY_PREFIXES`), the prefix and
  then ``source`` from its environment class's name on (whatever the module defines before the
  class is replaced by the prefix), fenced. None when the source has no such top-level class."""
  body = source.strip("\n") + "\n```"
  if not prefix:
    return "```python\n" + body
  if not prefix.endswith("class"):
    raise ValueError(f"a reply prefix must end with 'class', got {prefix[-20:]!r}")
  at = body.find(f"\nclass {class_name}")
  if body.startswith(f"class {class_name}"):
    at = -1
  elif at < 0:
    return None
  return prefix + body[at + len("\nclass") :]


def library_examples(
  kind: str,
  prefix: str,
  variants: int,
  validator: validation.ValidatorConfig,
  seed: int,
) -> tuple[list[Example], dict[str, int]]:
  """The warm start's examples of a setting (``kind``: "game" or "tool") and counts of what was
  dropped and why (``invalid``: the reply failed validation; ``no_class``: no reply form)."""
  todo: list[tuple[LibraryEntry, str, str, dict]] = []
  for k, e in enumerate(library_entries(kind)):
    todo.append((e, e.name, e.source, {}))
    found = difficulty_variants(e.source, e.class_name, variants, (seed, 29, k))
    for v, (source, changes) in enumerate(found):
      todo.append((e, f"{e.name}+{v + 1}", source, changes))
  replies = [reply_text(source, e.class_name, prefix) for e, _, source, _ in todo]
  checked = [i for i, r in enumerate(replies) if r is not None]
  reports = multihost.shared_map(
    lambda r: validation.validate(r, validator), [replies[i] for i in checked]
  )
  dropped = {"no_class": len(todo) - len(checked), "invalid": 0}
  out = []
  for i, report in zip(checked, reports):
    e, name, _, changes = todo[i]
    if report.valid and report.kind == kind and report.class_name == e.class_name:
      out.append(Example(name, e.skill, replies[i], changes))
    else:
      dropped["invalid"] += 1
  return out, dropped


def example_rows(designer, examples: list[Example], kind: str, seed: int, bucket: int = 256):
  """The examples as host `Trajectories` (designer rows, advantage 1, the reply and its stop
  token trained; None when none fits) and ``{name: reply tokens}`` of every example, with
  the names of those that fit. One that does not: a reply longer than the designer's
  ``max_new_tokens``, or a prompt that leaves no room for it even without seeds. Each prompt
  shows library seeds (`EnvMemory.select`) of a memory without the example's own environment."""
  tok, prefix = designer.tok, designer.cfg.reply_prefix
  entries = library_entries(kind)
  tokens, masks, kept, lengths = [], [], [], {}
  for i, ex in enumerate(examples):
    response = tok.encode(ex.reply[len(prefix) :]) + [tok.eos_ids[0]]
    lengths[ex.name] = len(response)
    memory = EnvMemory()
    base = ex.name.split("+")[0]
    for e in entries:
      if e.name != base:
        memory.add_seed(e.source, e.skill, name=e.name)
    seeds, _ = memory.select(ex.skill, seed=(seed, 29, i))
    key = (seed, 29, i, 0)
    conv, _ = designer.fitted_messages(ex.skill, None, seeds, None, key, room=len(response))
    prompt = designer.prompt_ids(conv, prefix)
    if len(response) > designer.cfg.max_new_tokens or len(prompt) + len(response) > (
      designer.max_context
    ):
      continue
    kept.append(ex.name)
    tokens.append(prompt + response)
    masks.append([0] * len(prompt) + [1] * len(response))
  if not tokens:
    return None, lengths, kept
  n = len(tokens)
  rows = trajectories.from_sequences(
    tokens,
    masks,
    [[0.0] * len(t) for t in tokens],
    role=trajectories.ROLE_DESIGNER,
    rewards=[1.0] * n,
    advantages=[1.0] * n,
    seq_len=-(-max(len(t) for t in tokens) // bucket) * bucket,
  )
  return rows, lengths, kept


def draw_batches(seed: int, rows: int, steps: int, batch: int) -> np.ndarray:
  """``[steps, batch]`` row indices: epochs of shuffled rows, one after another (a batch larger
  than the rows repeats rows within it)."""
  rng = np.random.default_rng([seed, 29, 7])
  need = steps * batch
  order = np.concatenate([rng.permutation(rows) for _ in range(-(-need // rows))])
  return order[:need].reshape(steps, batch).astype(np.int32)


def warm_start(graphdef, state, designer, config, mesh=None):
  """Runs ``config.warm_start.steps`` supervised designer steps of ``warm_start.batch`` rows;
  returns ``(state, metrics, record)`` (``record``: the per-step NLL and every example, JSON-able,
  with whether it trained). Raises `WarmStartError` when no example fits."""
  c = config.warm_start
  kind = designer.cfg.kind
  examples, dropped = library_examples(
    kind, designer.cfg.reply_prefix, c.variants, designer.validator, config.seed
  )
  rows, lengths, kept = example_rows(designer, examples, kind, config.seed)
  if rows is None:
    raise WarmStartError(
      f"warm start: none of the {len(examples)} library examples fits designer.max_new_tokens="
      f"{designer.cfg.max_new_tokens} and designer.max_context={designer.max_context}"
    )
  opt_cfg = dataclasses.replace(
    spade_config.optimizer_config(config), learning_rate=c.learning_rate
  )
  loss_cfg = losses.LossConfig(
    tis_cap=None, temperature=config.designer.temperature, logprob_chunk=config.train.logprob_chunk
  )
  run_step = np.asarray(jax.device_get(state.step))
  warm = state.replace(opt_state=make_optimizer(opt_cfg).init(state.params))
  update = make_update(
    graphdef,
    loss_cfg,
    opt_cfg,
    mesh=mesh,
    state=warm,
    **spade_config.micro_batching(config),
  )
  idx = draw_batches(config.seed, rows.batch_size, c.steps, c.batch)
  nll = []
  for t in range(c.steps):
    batch = jax.tree.map(lambda x, t=t: x[idx[t]], rows)
    warm, m = update(warm, batch)
    nll.append(float(jax.device_get(m["train/nll"])))
  state = warm.replace(
    step=jnp.asarray(run_step),
    opt_state=make_optimizer(spade_config.optimizer_config(config)).init(warm.params),
    ref_params=None if warm.ref_params is None else jax.tree.map(jnp.copy, warm.params),
  )
  metrics = {
    "warm/steps": float(c.steps),
    "warm/examples": float(rows.batch_size),
    "warm/variants": float(sum(bool(e.changes) for e in examples)),
    "warm/dropped_invalid": float(sum(dropped.values())),
    "warm/dropped_too_long": float(len(examples) - len(kept)),
    "warm/seq_len": float(rows.seq_len),
  }
  if nll:
    metrics["warm/nll_first"] = nll[0]
    metrics["warm/nll_last"] = float(np.mean(nll[-max(1, len(nll) // 4) :]))
  records = [
    dict(dataclasses.asdict(e), reply_tokens=lengths[e.name], trained=e.name in kept)
    for e in examples
  ]
  return state, metrics, {"nll": nll, "examples": records}
