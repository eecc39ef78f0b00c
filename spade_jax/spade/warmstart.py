"""Supervised designer warm start of the SPADE loop (issue 29; ``warm_start.steps > 0``, off by
default): before the first iteration, the policy is trained to write the setting's library
environments from the designer prompts a run starts with.

* **Examples**: every library environment that may train (`library_seeds.library_entries`: the
  game twins or the tool library, never a held-out one) and ``warm_start.variants`` difficulty
  variants of each (`difficulty_variants`: its constructor's integer defaults rescaled), each
  written as the reply the loop's designer gives (`reply_text`: the configured reply prefix, then
  the rest of the source, fenced). An example is kept only when that reply passes the designer's
  own validator as a sample would (a variant whose task became infeasible, or a twin that needs a
  module helper the reply prefix does not define, is dropped), is not what the loop rejects as a
  verbatim copy of a library seed (when the run seeds its memory with them, `copy_rejected`:
  then an original trains only in a reply-prefix form that differs from it, its variants always),
  and fits ``designer.max_new_tokens`` (a reply the loop could never finish teaches nothing).
* **Prompts**: built as a run's first designer prompts are (`Designer.fitted_messages`, room for
  ``max_new_tokens``): a grounding document when the run has a corpus (drawn by a sampler of its
  own, so the loop's draws are unchanged), and, when the run seeds its memory with the library,
  seeds drawn by `EnvMemory.select` from a memory holding every library environment *but the
  example's own*: the model learns to write an environment beside those it is shown.
* **Update**: the GRPO step with advantage 1 and no importance correction (one optimizer step
  per batch: ratio 1, so the gradient is that of the token cross-entropy of the reply at the
  designer's sampling temperature), its own AdamW at the constant ``warm_start.learning_rate``; the loop then starts with fresh optimizer moments, and
  (``train.kl_coef > 0``) the warm-started policy is the KL reference.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax import multihost, trajectories
from spade_jax.envs.sandbox import validate as validation
from spade_jax.rl import losses
from spade_jax.rl.optimizer import make_optimizer
from spade_jax.rl.train_state import state_shardings
from spade_jax.rl.update import make_update
from spade_jax.rollout.chat import ChatFraming
from spade_jax.spade import config as spade_config
from spade_jax.spade.corpus import CorpusSampler
from spade_jax.spade.library_seeds import LibraryEntry, library_entries
from spade_jax.spade.memory import EnvMemory, copy_key

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
  lines = source.split("\n")  # the line breaks ast counts (str.splitlines knows more)
  starts = np.cumsum([0] + [len(line) + 1 for line in lines])
  out = []
  for node in tree.body:
    if not (isinstance(node, ast.ClassDef) and node.name == class_name):
      continue
    for fn in node.body:
      if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
        continue
      positional = fn.args.posonlyargs + fn.args.args
      args = positional[len(positional) - len(fn.args.defaults) :] + fn.args.kwonlyargs
      defaults = list(fn.args.defaults) + list(fn.args.kw_defaults)
      for arg, d in zip(args, defaults):
        if isinstance(d, ast.Constant) and type(d.value) is int:
          line = lines[d.lineno - 1]
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
  found = re.search(rf"^class {re.escape(class_name)}\b", body, re.MULTILINE)
  if found is None:
    return None
  return prefix + body[found.start() + len("class") :]


def library_examples(
  kind: str,
  prefix: str,
  variants: int,
  validator: validation.ValidatorConfig,
  seed: int,
  copy_rejected: bool = False,
) -> tuple[list[Example], dict[str, int]]:
  """The warm start's examples of a setting (``kind``: "game" or "tool") and counts of what was
  dropped and why (``no_class``: no reply form; ``copy``: with ``copy_rejected``, a reply whose
  code is a whitespace-normalised copy of a library environment, as the loop's designer rejects
  when its memory holds library seeds; ``invalid``: the reply failed validation)."""
  todo: list[tuple[LibraryEntry, str, str, dict]] = []
  for k, e in enumerate(library_entries(kind)):
    todo.append((e, e.name, e.source, {}))
    found = difficulty_variants(e.source, e.class_name, variants, (seed, 29, k))
    for v, (source, changes) in enumerate(found):
      todo.append((e, f"{e.name}+{v + 1}", source, changes))
  replies = [reply_text(source, e.class_name, prefix) for e, _, source, _ in todo]
  library = {copy_key(e.source) for e in library_entries(kind)} if copy_rejected else set()
  copies = {
    i
    for i, r in enumerate(replies)
    if r is not None and copy_key(validation.extract_code(r)) in library
  }
  checked = [i for i, r in enumerate(replies) if r is not None and i not in copies]
  reports = multihost.shared_map(
    lambda r: validation.validate(r, validator), [replies[i] for i in checked]
  )
  dropped = {"no_class": sum(r is None for r in replies), "copy": len(copies), "invalid": 0}
  out = []
  for i, report in zip(checked, reports):
    e, name, _, changes = todo[i]
    if report.valid and report.kind == kind and report.class_name == e.class_name:
      out.append(Example(name, e.skill, replies[i], changes))
    else:
      dropped["invalid"] += 1
  return out, dropped


def example_rows(
  designer,
  examples: list[Example],
  kind: str,
  seed: int,
  *,
  seeded: bool,
  documents: Sequence[str] | None = None,
  bucket: int = 256,
):
  """The examples as host `Trajectories` (designer rows, advantage 1, the reply and the chat's
  end-of-turn token trained; None when none fits), ``{name: reply tokens}`` of every example,
  and the names of those that fit. One does not when its reply is longer than the designer's
  ``max_new_tokens`` or its prompt leaves no room for the reply even without seeds. Prompts are
  a run's first prompts (module docstring): a document of ``documents`` (drawn by a sampler of
  its own) and, when ``seeded``, library seeds of a memory without the example's own
  environment."""
  tok, prefix = designer.tok, designer.cfg.reply_prefix
  stop = ChatFraming.from_tokenizer(tok).turn_end
  entries = library_entries(kind)
  corpus = CorpusSampler(documents, seed=seed + 29) if documents else None
  tokens, masks, kept, lengths = [], [], [], {}
  for i, ex in enumerate(examples):
    response = tok.encode(ex.reply[len(prefix) :]) + [stop]
    lengths[ex.name] = len(response)
    seeds = ()
    if seeded:
      memory = EnvMemory()
      base = ex.name.split("+")[0]
      for e in entries:
        if e.name != base:
          memory.add_seed(e.source, e.skill, name=e.name)
      seeds, _ = memory.select(ex.skill, seed=(seed, 29, i))
    doc = corpus.next() if corpus is not None else None
    conv, _ = designer.fitted_messages(ex.skill, doc, seeds, None, (seed, 29, i, 0))
    prompt = designer.prompt_ids(conv, prefix)
    too_long = len(response) > designer.cfg.max_new_tokens
    if too_long or len(prompt) + len(response) > designer.max_context:
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


def warm_start(graphdef, state, designer, config, mesh=None, documents=None):
  """Runs ``config.warm_start.steps`` supervised designer steps of ``warm_start.batch`` rows on
  ``state``, a run's fresh train state (its optimizer moments are the warm start's first, then
  the loop's fresh ones); ``documents``: the run's grounding corpus, if any. Returns ``(state,
  metrics, record)`` (``record``: the per-step NLL and every example, JSON-able, with its reply
  length and whether it trained). Raises `WarmStartError` when no example fits."""
  c, s = config.warm_start, config.spade
  kind = designer.cfg.kind
  seeded = bool(s.memory and s.library_seeds and designer.cfg.use_memory)
  examples, dropped = library_examples(
    kind, designer.cfg.reply_prefix, c.variants, designer.validator, config.seed, seeded
  )
  rows, lengths, kept = example_rows(
    designer, examples, kind, config.seed, seeded=seeded, documents=documents
  )
  if rows is None:
    raise WarmStartError(
      f"warm start: none of the {len(examples)} library examples fits designer.max_new_tokens="
      f"{designer.cfg.max_new_tokens} and designer.max_context={designer.max_context}"
    )
  run_opt = spade_config.optimizer_config(config)
  opt_cfg = dataclasses.replace(run_opt, learning_rate=c.learning_rate)
  loss_cfg = losses.LossConfig(
    tis_cap=None, temperature=config.designer.temperature, logprob_chunk=config.train.logprob_chunk
  )
  # the constant schedule keeps no learning rate in the optimizer state: the fresh state's
  # moments serve the warm start's optimizer as they are (no second set in memory)
  update = make_update(
    graphdef, loss_cfg, opt_cfg, mesh=mesh, state=state, **spade_config.micro_batching(config)
  )
  run_step = int(jax.device_get(state.step))
  idx = draw_batches(config.seed, rows.batch_size, c.steps, c.batch)
  nll, skipped = [], 0
  for t in range(c.steps):
    state, m = update(state, jax.tree.map(lambda x, t=t: x[idx[t]], rows))
    m = jax.device_get(m)
    nll.append(float(m["train/nll"]))
    skipped += int(m["train/update_skipped"] > 0)
  state = loop_state(state, make_optimizer(run_opt), run_step, mesh)
  metrics = {
    "warm/steps": float(c.steps),
    "warm/examples": float(rows.batch_size),
    "warm/variants": float(sum(bool(e.changes) for e in examples)),
    "warm/skipped_steps": float(skipped),
    "warm/seq_len": float(rows.seq_len),
    "warm/dropped_too_long": float(len(examples) - len(kept)),
  }
  metrics.update({f"warm/dropped_{k}": float(v) for k, v in dropped.items()})
  if nll:  # the first step's NLL (before any update) and the mean over the last quarter
    metrics["warm/nll_first"] = nll[0]
    metrics["warm/nll_last"] = float(np.mean(nll[-max(1, len(nll) // 4) :]))
  records = [
    dict(dataclasses.asdict(e), reply_tokens=lengths[e.name], trained=e.name in kept)
    for e in examples
  ]
  return state, metrics, {"nll": nll, "examples": records}


def loop_state(state, optimizer, step: int, mesh=None):
  """The warm state as the loop starts from it, in place (the warm state is donated): update
  count ``step``, ``optimizer``'s fresh moments, and (when the state has one) the warm policy
  as the KL reference."""

  def reset(s):
    return s.replace(
      step=jnp.asarray(step, s.step.dtype),
      opt_state=optimizer.init(s.params),
      ref_params=None if s.ref_params is None else jax.tree.map(jnp.copy, s.params),
    )

  if mesh is None:
    return jax.jit(reset, donate_argnums=0)(state)
  sh = state_shardings(state, mesh)
  return jax.jit(reset, in_shardings=(sh,), out_shardings=sh, donate_argnums=0)(state)
