"""`TinySetup`: everything a tiny run builds from its config (tokenizer, designer language,
rollout and iteration specs, optimizer, library programs, skill schedule) and its per-step host
inputs; used by the run (`tiny.train`), its compile-ahead child (`tiny.compile_ahead`), the
warm start, benchmarks and tests. `place` commits a tree to the run's one device.
"""

from __future__ import annotations

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from spade_jax import multihost
from spade_jax.envs.ir.parse import make_parse_tables
from spade_jax.envs.ir.program import stack_programs
from spade_jax.envs.library import FAMILIES
from spade_jax.models import Transformer, TransformerConfig
from spade_jax.rl.optimizer import OptimizerConfig, make_optimizer
from spade_jax.rl.train_state import create_train_state
from spade_jax.rollout.chat import ChatFraming
from spade_jax.rollout.types import RolloutSpec
from spade_jax.spade import rewards, skills
from spade_jax.spade.config import loss_config
from spade_jax.spade.memory import EnvMemory
from spade_jax.spade.skills import NUM_SKILLS
from spade_jax.tiny.config import TinyRunConfig, typed_config
from spade_jax.tiny.heldout import LibraryPrograms, training_settings
from spade_jax.tiny.language import TINY_CONFIG, Language
from spade_jax.tiny.spec import StepInputs, TinySpec, init_carry
from spade_jax.tiny.tokenizer import load_tiny_tokenizer

DESIGNER_INSTRUCTION = "Design a game. Skill: {skill}."


def model_config(config: TinyRunConfig, vocab_size: int) -> TransformerConfig:
  m = config.model
  return TransformerConfig(
    vocab_size=vocab_size,
    embed_dim=m.embed_dim,
    num_layers=m.num_layers,
    num_heads=m.num_heads,
    num_kv_heads=m.num_kv_heads,
    head_dim=m.head_dim,
    mlp_dim=m.mlp_dim,
    rope_theta=m.rope_theta,
    qk_norm=True,
    tie_embeddings=m.tie_embeddings,
    max_position=4096,
    model_type="qwen3",
    attention_impl=m.attention_impl,
  )


class TinySetup:
  """Everything a tiny run builds from its config (also used by the benchmark and tests).
  ``config``: a `tiny_config` ConfigDict or its `TinyRunConfig`; ``self.config`` is the latter
  (`typed_config`: checked, ValueError on a bad value)."""

  def __init__(self, config: TinyRunConfig | ml_collections.ConfigDict):
    self.config = c = typed_config(config)
    self.tok = load_tiny_tokenizer()
    self.lang = Language.make(self.tok, TINY_CONFIG, max_tokens=c.designer.program_tokens)
    self.framing = ChatFraming.from_tokenizer(self.tok)
    self.rollout_spec = RolloutSpec.make(
      self.tok,
      self.framing,
      max_context=c.agent.max_context,
      program_cfg=self.lang.cfg,
      prompt_len=c.agent.prompt_len,
      feed_chunk=c.agent.feed_chunk,
    )
    self.model_cfg = model_config(c, self.tok.vocab_size)
    self.opt_cfg = OptimizerConfig(
      learning_rate=c.train.learning_rate,
      schedule=c.train.schedule,
      decay_steps=c.steps if c.train.schedule != "constant" else 0,
      min_lr_ratio=c.train.min_lr_ratio,
      warmup_steps=c.train.warmup_steps,
      b1=c.train.b1,
      b2=c.train.b2,
      weight_decay=c.train.weight_decay,
      grad_clip_norm=c.train.grad_clip_norm or None,
    )
    s = c.spade
    reward = rewards.DesignerRewardConfig(
      variant=s.reward, scale_cap=s.reward_scale_cap, plateau=tuple(s.plateau)
    )
    self.spec = TinySpec(
      lang=self.lang,
      rollout=self.rollout_spec,
      num_games=s.num_games,
      plays=s.plays,
      hint_plays=s.hint_plays,
      regen_interval=s.regen_interval,
      prompt_len=c.designer.prompt_len,
      reward=reward,
      loss=loss_config(c),
      opt=self.opt_cfg,
      temperature=c.agent.temperature,
      top_p=c.agent.top_p,
      top_k=c.agent.top_k,
      agent_turns=c.agent.max_turns,
      agent_new_tokens=c.agent.max_new_tokens,
      feasibility_seeds=c.designer.feasibility_seeds,
      attempts=c.designer.attempts,
      fallback=c.designer.fallback,
      reference_plays=c.designer.reference_plays,
      advantage=c.train.advantage,
      reward_scale=rewards.reward_scale(
        s.num_games * s.plays, s.num_games, s.regen_interval, s.reward_scale_cap
      ),
    )
    self.library = LibraryPrograms.build(
      self.lang, self.tok, c.designer.library_hints, only=tuple(c.families)
    )
    self.train_families, self.heldout_families = self.library.split()
    names = list(dict.fromkeys(FAMILIES[f].skill for f in self.train_families))
    self.skill_schedule = skills.SkillSchedule(
      skills=tuple(names), active=min(s.active_skills, len(names))
    )
    self.parse = make_parse_tables(self.tok.token_bytes)

  def init_state(self):
    model = Transformer(self.model_cfg, rngs=nnx.Rngs(self.config.seed))
    graphdef, state = create_train_state(
      model,
      make_optimizer(self.opt_cfg),
      seed=self.config.seed,
      # the warm start then replaces it with the warm-started policy
      with_reference=self.config.train.kl_coef > 0 or self.config.designer.reference_plays > 0,
    )
    first = self.library.by_family[self.train_families[0]]
    carry = init_carry(self.spec, first[min(first)], NUM_SKILLS)
    return graphdef, state, carry

  # ----------------------------------------------------------------------- per-step inputs
  def skills_of(self, step: int) -> tuple[str, ...]:
    epoch = step // self.config.spade.regen_interval
    return skills.assign_skills(epoch, self.config.spade.num_games, self.skill_schedule)

  def designer_prompt(self, skill: str, seed_tokens=None) -> list[int]:
    """Chat-framed designer prompt: the instruction with the skill, then (if it fits) one
    high-regret program of the same skill from memory, as designer tokens."""
    fr = self.framing
    content = self.tok.encode(DESIGNER_INSTRUCTION.format(skill=skill))
    ids = list(fr.first_prefix) + content + list(fr.first_suffix)
    if seed_tokens and len(ids) + len(seed_tokens) <= self.config.designer.prompt_len:
      ids = list(fr.first_prefix) + content + list(seed_tokens) + list(fr.first_suffix)
    if len(ids) > self.config.designer.prompt_len:
      raise ValueError(f"designer prompt of {len(ids)} tokens > designer.prompt_len")
    return ids

  def inputs(self, step: int, memory: EnvMemory | None) -> StepInputs:
    c, G, Tp = self.config, self.config.spade.num_games, self.config.designer.prompt_len
    names = self.skills_of(step)
    prompts = np.zeros((G, Tp), np.int32)
    valid = np.zeros((G, Tp), bool)
    for g, skill in enumerate(names):
      seed_tokens = None
      if memory is not None:
        positives, _ = memory.select(skill, seed=(c.seed, step, g))
        if positives:
          seed_tokens = self.lang.encode(positives[0].source)
      ids = self.designer_prompt(skill, seed_tokens)
      prompts[g, Tp - len(ids) :], valid[g, Tp - len(ids) :] = ids, True
    return StepInputs(
      step=np.int32(step),
      seed=np.int32(c.seed),
      prompts_GP=prompts,
      prompt_valid_GP=valid,
      skill_G=np.asarray(skills.skill_ids(names), np.int32),
      fixed_programs=self.fixed_pool(step),
      parse=self.parse,
    )

  def fixed_pool(self, step: int):
    """The ``fixed`` baseline's pool: the library's training settings (those the warm start
    uses), a random draw per regeneration seeded by (seed, epoch); also fills the (ignored)
    slot of the other variants."""
    c = self.config
    rng = np.random.default_rng([c.seed, step // c.spade.regen_interval, 77])
    settings = training_settings(self.library, c.warm_start.max_level)
    picks = rng.integers(len(settings), size=c.spade.num_games)
    return stack_programs([self.library.by_family[n][lv] for n, lv in (settings[i] for i in picks)])


def place(tree):
  """``tree`` committed to the run's one device. A tiny run places its state and carry this way
  once, fresh or resumed, and every step's inputs: restored arrays are committed, fresh ones
  (and some of the warm start's) are not, and jit keys its executables on that, so mixed
  placements compile extra executables and make a resumed run miss the persistent compilation
  cache. Committed inputs also give the jitted iteration the cache key of one lowered ahead of
  time from `ShapeDtypeStruct`s with these shardings; uncommitted step inputs lower without
  their `sdy.sharding` and miss it (a two-process probe, d12a6e5: BUILD_NOTES.md, "Deleted
  probes", tiny_cache_key).

  A run of several processes (`spade_jax.multihost`) runs the same one-device program on one
  device of each process: the tree becomes global arrays replicated over those devices (process
  ``p``'s first device), each process filling its own copy from its host value (every process
  computes the same values), so every step computes what a one-process run computes, with no
  collective inside the iteration, and checkpoints write each array once."""
  if jax.process_count() == 1:
    return jax.device_put(tree, jax.devices()[0])
  spans = _run_sharding()
  return multihost.from_host(
    jax.tree.map(_host_value, multihost.to_host(tree)), jax.tree.map(lambda _: spans, tree)
  )


def _run_sharding() -> NamedSharding:
  """The placement of a tiny run's arrays: ``jax.devices()[0]`` in one process, replicated over
  the first device of every process in several."""
  firsts = {}
  for d in sorted(jax.devices(), key=lambda d: d.id):
    firsts.setdefault(d.process_index, d)
  devices = np.asarray([firsts[p] for p in sorted(firsts)], dtype=object)
  return NamedSharding(Mesh(devices, ("process",)), PartitionSpec())


def _host_value(x):
  """A host leaf as the numpy array jax would make of it (64-bit Python numbers narrowed as
  jax narrows them without x64)."""
  x = np.asarray(x)
  return x.astype(jax.dtypes.canonicalize_dtype(x.dtype))
