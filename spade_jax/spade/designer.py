"""The designer side of a SPADE iteration: prompts -> environments -> validation -> hints.

For every game slot of a regenerated pool the policy (in its designer role) writes an
environment; each attempt is validated in the sandbox; a slot whose attempt fails is retried
with a fresh prompt (a fresh grounding document, new memory seeds) up to ``max_attempts``.
Every attempt is a designer sample (prompt + response tokens, the sampler's log-probs) whose
``game`` field says which slot it filled (-1 for a rejected attempt: no gradient). Validated
environments then get a hint from the same policy in its hint-writer role (not trained).
Translation to an ``EnvProgram`` is attempted when a translator is installed; environments
that do not translate run on the host in the sandbox.

With library seeds in the memory (`library_seeds.seed_memory`), an attempt whose extracted code is a verbatim
copy of one from its class on (whitespace-normalised, `memory.copy_key`) is rejected at its own stage, "copy", before the sandbox
runs; a prompt whose seeds would leave less than ``max_new_tokens`` of ``max_context`` drops
seeds (last first) until it fits. Stage counts, passes, translation refusals and seeds shown are
in the metrics (`spade.observe`). An optional ``reply_prefix`` (a fixed, generic opening of every
reply, `prompts.REPLY_PREFIXES`) is forced after the assistant header; the model continues it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from spade_jax import multihost
from spade_jax.engine.generate import Engine, GenerateOutput, SamplingParams
from spade_jax.envs.sandbox import validate as validation
from spade_jax.spade import observe, prompts, tool_prompts
from spade_jax.spade.corpus import CorpusSampler
from spade_jax.spade.library_seeds import library_entries
from spade_jax.spade.memory import EnvMemory
from spade_jax.spade.skills import get_skill
from spade_jax.tokenizer import Tokenizer


@dataclasses.dataclass(frozen=True)
class DesignerConfig:
  num_games: int = 4
  max_attempts: int = 2
  temperature: float = 0.6
  top_p: float = 0.95
  top_k: int = 20
  max_new_tokens: int = 1024
  hint_temperature: float = 0.3
  hint_max_new_tokens: int = 96
  use_memory: bool = True
  setting: str = "games"  # or "tool_use" (spade.config.SETTINGS)
  tool_difficulties: tuple[str, ...] = ("easy", "medium", "hard")  # cycled over game slots
  multi_instruction: float = 0.5  # share of tool prompts asking for multi-instruction tasks
  # prompts sampled at once (designer and hint generation run in waves of this many; wave 0
  # with the call's seed, wave w with derive_seed(seed, w)); 0: all at once
  wave_size: int = 0
  # the opening of every designer reply, fixed and the same for every skill (e.g. a code fence,
  # the imports and "class"): forced after the chat template's assistant header, so sampling
  # continues it; the extracted source is prefix + sample. "" (the default): no prefix
  reply_prefix: str = ""

  @property
  def kind(self) -> str:
    """The environment kind this setting's designer must write ("game" or "tool")."""
    return "tool" if self.setting == "tool_use" else "game"


def _concat(outs: list[GenerateOutput]) -> GenerateOutput:
  """One `GenerateOutput` of consecutive waves' outputs."""
  if len(outs) == 1:
    return outs[0]
  return GenerateOutput(
    **{f.name: [x for o in outs for x in getattr(o, f.name)] for f in dataclasses.fields(outs[0])}
  )


@dataclasses.dataclass
class GameEnv:
  """One validated environment of the pool."""

  game: int
  skill: str
  source: str
  class_name: str
  hint: str
  attempt: int
  gen_step: int
  translated: bool = False
  translation_reason: str = "translator not available"
  program: Any = None  # an EnvProgram when translated
  file: str = ""
  kind: str = "game"  # "tool": a ToolEnv played by the tool-calling agent, on the host

  def to_state(self) -> dict:
    """JSON-able state; the program's arrays are kept so a resumed run plays the same games
    on the same path (re-translating would cost a differential check per game)."""
    d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "program"}
    if self.program is not None:
      d["program"] = {
        f.name: np.asarray(getattr(self.program, f.name)).tolist()
        for f in dataclasses.fields(self.program)
      }
    return d

  @classmethod
  def from_state(cls, d: dict) -> GameEnv:
    d = dict(d)
    if d.get("program") is not None:
      from spade_jax.envs.ir.program import program_from_arrays

      d["program"] = program_from_arrays(d["program"])
    return cls(**d)


def derive_seed(*parts: int) -> int:
  """A 31-bit seed mixed from integers (stable across processes, unlike ``hash`` of str)."""
  return int(
    np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(1)[0] & 0x7FFFFFFF
  )


def _translate(source: str, tokenizer, hint: str, seeds: int) -> dict:
  """Translation + differential check; a translator failure never loses a valid environment
  (it then runs on the host). The program is built for the policy's own tokenizer and carries
  the hint in its hint template."""
  from spade_jax.envs.translate import pipeline as translate

  try:
    return translate.translate_and_check(source, None, tokenizer=tokenizer, seeds=seeds, hint=hint)
  except Exception as e:
    return {"translated": False, "translation_reason": f"translator failed: {e}"}


class Designer:
  """Writes, validates and hints a pool of environments with the shared policy."""

  def __init__(
    self,
    engine: Engine,
    tok: Tokenizer,
    cfg: DesignerConfig,
    validator: validation.ValidatorConfig,
    envs_dir: Path,
    max_context: int = 8192,
    translate_seeds: int = 64,
  ):
    self.engine, self.tok, self.cfg, self.validator = engine, tok, cfg, validator
    self.envs_dir = Path(envs_dir)
    self.envs_dir.mkdir(parents=True, exist_ok=True)
    self.writes = multihost.is_writer()  # records: process 0 of a multi-process run only
    self.max_context = max_context
    self.translate_seeds = translate_seeds

  def _sample(
    self, conversations, *, temperature, top_p, top_k, max_new_tokens, seed, params, prefix=""
  ):
    """Samples a reply to each conversation; ``prefix`` (text) is appended to every prompt after
    the assistant header, so the replies continue it (it is part of the prompt ids)."""
    prompts_ids = [self.prompt_ids(c, prefix) for c in conversations]
    longest = max(len(p) for p in prompts_ids)
    cache = self.engine.bucket(longest + max_new_tokens)
    if longest + 1 >= min(cache, self.max_context):
      raise ValueError(
        f"a designer prompt of {longest} tokens leaves no room to generate "
        f"(max_context={self.max_context}); shorten the grounding document"
      )
    size = self.cfg.wave_size or len(prompts_ids)
    outs = []
    for w, at in enumerate(range(0, len(prompts_ids), size)):
      wave = prompts_ids[at : at + size]
      state = self.engine.init(
        wave,
        max_new_tokens=max_new_tokens,
        cache_size=min(cache, self.max_context),
        stop_token_ids=list(self.tok.eos_ids),
        seed=seed if w == 0 else derive_seed(seed, w),
        params=params,
      )
      sampling = SamplingParams.make(len(wave), temperature=temperature, top_p=top_p, top_k=top_k)
      outs.append(self.engine.outputs(self.engine.run(state, sampling, params=params)))
    return prompts_ids, _concat(outs)

  def design(
    self,
    *,
    gen_step: int,
    skills: list[str],
    memory: EnvMemory | None,
    corpus: CorpusSampler | None,
    seed: int,
    params=None,
  ) -> tuple[list, list, dict]:
    """Returns ``(games, samples, metrics)``: ``games[g]`` a GameEnv or None (no valid
    attempt), ``samples`` the designer sample records (JSON-able)."""
    cfg = self.cfg
    t0 = time.perf_counter()
    games: list[GameEnv | None] = [None] * cfg.num_games
    samples: list[dict] = []
    timing = {"generate": 0.0, "validate": 0.0}
    stages: dict[str, int] = {}
    shown: list[tuple[int, int]] = []  # per prompt: (seeds shown, library seeds shown)
    for attempt in range(cfg.max_attempts):
      todo = [g for g in range(cfg.num_games) if games[g] is None]
      if not todo:
        break
      convs = []
      for g in todo:
        seeds, negative = ((), None)
        if memory is not None and cfg.use_memory:
          seeds, negative = memory.select(skills[g], seed=(seed, gen_step, g, attempt))
        doc = corpus.next() if corpus is not None else None
        key = (seed, gen_step, g, attempt)
        conv, seeds = self.fitted_messages(skills[g], doc, seeds, negative, key)
        shown.append((len(seeds), sum(r.is_seed for r in seeds)))
        convs.append(conv)
      t = time.perf_counter()
      prompt_ids, out = self._sample(
        convs,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_new_tokens=cfg.max_new_tokens,
        seed=derive_seed(seed, gen_step, attempt, 1),
        params=params,
        prefix=cfg.reply_prefix,
      )
      timing["generate"] += time.perf_counter() - t
      texts = [  # the forced reply prefix is part of the source
        cfg.reply_prefix + self.tok.decode(resp[:-1] if done else resp)
        for resp, done in zip(out.tokens, out.finished)
      ]
      t = time.perf_counter()
      # each process validates its share of the samples (one process: all), the reports are
      # gathered to every process
      reports = multihost.shared_map(
        lambda text: self._copy_report(text, memory) or validation.validate(text, self.validator),
        texts,
      )
      timing["validate"] += time.perf_counter() - t
      for k, g in enumerate(todo):
        resp, text, report = out.tokens[k], texts[k], reports[k]
        if report.valid and report.kind != cfg.kind:
          report.valid, report.stage = False, "static"
          report.reason = (
            f"a {report.kind} environment where the {cfg.setting} setting needs a {cfg.kind} "
            "environment"
          )
        stages[report.stage] = stages.get(report.stage, 0) + 1
        stem = f"step{gen_step:06d}_game{g:02d}_attempt{attempt}"
        self._record(f"{stem}.py", report.source or text)
        verdict = report.to_dict()
        verdict.update(
          skill=skills[g],
          gen_step=gen_step,
          game=g,
          attempt=attempt,
          response_tokens=len(resp),
          finished=bool(out.finished[k]),
        )
        if report.valid:
          games[g] = GameEnv(
            game=g,
            skill=skills[g],
            source=report.source,
            class_name=report.class_name,
            hint="",
            attempt=attempt,
            gen_step=gen_step,
            file=f"{stem}.py",
            kind=cfg.kind,
          )
        self._record(f"{stem}.json", json.dumps(verdict, indent=1, default=str))
        samples.append(
          {
            "game": g if report.valid else -1,
            "attempt": attempt,
            "skill": skills[g],
            "prompt": list(prompt_ids[k]),
            "response": list(resp),
            "logprobs": [float(x) for x in out.logprobs[k]],
            "mask": list(out.loss_mask[k]),
            "stem": stem,
          }
        )
    valid = [g for g in games if g is not None]
    hint_metrics = self.write_hints(valid, seed=derive_seed(seed, gen_step, 2), params=params)
    attempts = len(samples)
    metrics = {
      "designer/valid_rate": len(valid) / cfg.num_games,
      "designer/attempt_valid_rate": sum(s["game"] >= 0 for s in samples) / max(attempts, 1),
      "designer/attempts": float(attempts),
      "designer/translated_rate": sum(g.translated for g in valid) / max(len(valid), 1),
      "designer/response_tokens_mean": float(np.mean([len(s["response"]) for s in samples]))
      if samples
      else 0.0,
      "designer/prompt_seeds_mean": float(np.mean([n for n, _ in shown])) if shown else 0.0,
      "designer/prompt_library_seeds_mean": float(np.mean([k for _, k in shown])) if shown else 0.0,
      "perf/designer_generate_s": timing["generate"],
      "perf/validate_s": timing["validate"],
    }
    metrics.update(hint_metrics)
    metrics.update(observe.stage_metrics(stages))
    metrics["perf/designer_total_s"] = time.perf_counter() - t0
    return games, samples, metrics

  def prompt_ids(self, conv, prefix: str) -> list[int]:
    """The token ids a reply to ``conv`` is sampled after: the chat template with the assistant
    header, then ``prefix`` (text the reply is forced to start with; "" for none)."""
    return self.tok.apply_chat_template(conv) + (self.tok.encode(prefix) if prefix else [])

  def fitted_messages(self, skill: str, document, seeds, negative, key: tuple, room: int = 0):
    """``(conversation, seeds kept)``: `messages` with the memory ``seeds`` dropped, the last
    first, until the prompt (with the reply prefix) leaves ``room`` tokens of ``max_context``
    to write in (0: ``max_new_tokens``)."""
    room = room or self.cfg.max_new_tokens
    seeds = tuple(seeds)
    while True:
      conv = self.messages(skill, document, seeds, negative, key)
      if not seeds or len(self.prompt_ids(conv, self.cfg.reply_prefix)) + room <= self.max_context:
        return conv, seeds
      seeds = seeds[:-1]

  def _copy_report(self, text: str, memory: EnvMemory | None):
    """A failed report at stage "copy" when the extracted code repeats a library seed of
    ``memory`` verbatim (`memory.copy_key`: from the class on, whitespace-normalised), else None."""
    if memory is None or not memory.seeds:
      return None
    source = validation.extract_code(text)
    seed = memory.is_seed_copy(source)
    if seed is None:
      return None
    return validation.ValidationReport(
      valid=False,
      stage="copy",
      reason=f"a verbatim copy of the library seed environment {seed.name or seed.skill!r}",
      timings={},
      seeds=list(self.validator.seeds),
      source=source,
    )

  def messages(self, skill: str, document, seeds, negative, key: tuple) -> list[dict]:
    """The designer prompt of one attempt (``key``: run seed, step, game, attempt)."""
    cfg = self.cfg
    if cfg.kind == "game":
      return prompts.designer_messages(
        get_skill(skill), document=document, seeds=seeds, negative=negative
      )
    levels = cfg.tool_difficulties
    return tool_prompts.tool_designer_messages(
      get_skill(skill),
      difficulty=levels[key[2] % len(levels)],
      multi_instruction=derive_seed(*key, 5) % 1000 < cfg.multi_instruction * 1000,
      document=document,
      seeds=seeds,
      negative=negative,
    )

  def hint_messages(self, game: GameEnv) -> list[dict]:
    """The hint writer's prompt for ``game``; a source too long for ``max_context`` (with room
    for the hint) is cut to its first lines that fit, and says so."""
    build = (
      tool_prompts.tool_hint_writer_messages
      if game.kind == "tool"
      else prompts.hint_writer_messages
    )
    budget = self.max_context - self.cfg.hint_max_new_tokens - 1
    messages = build(game.source)
    if len(self.tok.apply_chat_template(messages)) <= budget:
      return messages
    lines = game.source.splitlines()
    lo, hi = 0, len(lines)  # the longest prefix that fits: lo fits (or is 0), hi does not
    while hi - lo > 1:
      mid = (lo + hi) // 2
      cut = build("\n".join(lines[:mid]) + "\n# ... (the rest of the source is cut)")
      lo, hi = (mid, hi) if len(self.tok.apply_chat_template(cut)) <= budget else (lo, mid)
    return build("\n".join(lines[:lo]) + "\n# ... (the rest of the source is cut)")

  def write_hints(self, games: list[GameEnv], *, seed: int, params=None) -> dict:
    """Fills ``g.hint`` (hint-writer role, not trained) and the translation status of each
    game; returns metrics: ``perf/hint_s`` (hint sampling), ``perf/translate_s`` (translation
    and its differential check) and ``designer/refusal/<reason>`` counts of the games the
    translator refused."""
    if not games:
      return {"perf/hint_s": 0.0, "perf/translate_s": 0.0}
    cfg = self.cfg
    t = time.perf_counter()
    _, out = self._sample(
      [self.hint_messages(g) for g in games],
      temperature=cfg.hint_temperature,
      top_p=1.0,
      top_k=0,
      max_new_tokens=cfg.hint_max_new_tokens,
      seed=seed,
      params=params,
    )
    hint_s = time.perf_counter() - t
    for k, g in enumerate(games):
      resp = out.tokens[k]
      g.hint = prompts.parse_hint(self.tok.decode(resp[:-1] if out.finished[k] else resp))
    t = time.perf_counter()
    # each process translates and checks its share of the games, the results are gathered
    translations = multihost.shared_map(
      lambda g: (
        {"translated": False, "translation_reason": "tool environments run on the host"}
        if g.kind == "tool"
        else _translate(g.source, self.tok, g.hint, self.translate_seeds)
      ),
      games,
    )
    translate_s = time.perf_counter() - t
    for g, tr in zip(games, translations):
      g.translated = bool(tr.get("translated", False))
      g.translation_reason = str(tr.get("translation_reason", ""))
      g.program = tr.get("program")
      self.update_record(
        g.file, hint=g.hint, translated=g.translated, translation_reason=g.translation_reason
      )
    metrics = {"perf/hint_s": hint_s, "perf/translate_s": translate_s}
    metrics.update(observe.refusal_metrics(g.translation_reason for g in games if not g.translated))
    return metrics

  def library_pool(
    self, *, gen_step: int, skills: list[str], seed: int, params=None
  ) -> tuple[list[GameEnv], dict]:
    """The seed pool: library environments (trusted, still run in the sandbox) of the setting,
    one per game slot, preferring one of the slot's skill; hints by the policy's hint writer.
    Returns ``(games, metrics)`` (`write_hints`'s metrics)."""
    entries = library_entries(self.cfg.kind)
    games = []
    for g, skill in enumerate(skills):
      same = [e for e in entries if e.skill == skill] or entries
      entry = same[derive_seed(seed, gen_step, g) % len(same)]
      stem = f"step{gen_step:06d}_game{g:02d}_library_{entry.name}"
      self._record(f"{stem}.py", entry.source)
      self._record(
        f"{stem}.json",
        json.dumps(
          {
            "valid": True,
            "stage": "ok",
            "reason": "library seed environment",
            "skill": skill,
            "gen_step": gen_step,
            "game": g,
            "family": entry.name,
          },
          indent=1,
        ),
      )
      games.append(
        GameEnv(
          game=g,
          skill=skill,
          source=entry.source,
          class_name=entry.class_name,
          hint="",
          attempt=-1,
          gen_step=gen_step,
          file=f"{stem}.py",
          kind=self.cfg.kind,
        )
      )
    metrics = self.write_hints(games, seed=derive_seed(seed, gen_step, 3), params=params)
    return games, metrics

  def _record(self, name: str, text: str) -> None:
    if self.writes:
      (self.envs_dir / name).write_text(text)

  def update_record(self, file: str, **fields) -> None:
    """Adds fields (hint, translation, results) to an environment's verdict JSON."""
    if not self.writes:
      return
    path = self.envs_dir / (Path(file).stem + ".json")
    record = json.loads(path.read_text()) if path.exists() else {}
    record.update(fields)
    path.write_text(json.dumps(record, indent=1, default=str))
