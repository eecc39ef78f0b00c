"""The plan's inputs: command-line values, the config and its model, the compiled shapes."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

GIB = 1024**3


class PlanError(Exception):
  """Bad input to the plan: one line, exit 2."""


# ---------------------------------------------------------------------------------- arguments
def parse_mesh(text: str) -> dict[str, int]:
  """``"data=1,fsdp=8,tensor=1"`` -> ``{"data": 1, "fsdp": 8, "tensor": 1}`` (names are checked
  against the sharding module's axes once jax may be imported)."""
  out: dict[str, int] = {}
  for part in (p.strip() for p in text.split(",") if p.strip()):
    name, sep, size = part.partition("=")
    name = name.strip()
    if not sep or not name or not size.strip().isdigit() or int(size) < 1:
      raise PlanError(f"--mesh {text!r}: expected name=size pairs with sizes >= 1, e.g. fsdp=8")
    if name in out:
      raise PlanError(f"--mesh {text!r}: axis {name!r} given twice")
    out[name] = int(size)
  if not out:
    raise PlanError("--mesh is empty: give name=size pairs, e.g. data=1,fsdp=8,tensor=1")
  return out


def set_device_count(n: int, env=None) -> None:
  """Puts ``--xla_force_host_platform_device_count=n`` into ``XLA_FLAGS`` (replacing any) and
  selects the CPU platform: call before jax is imported."""
  env = os.environ if env is None else env
  flag = "--xla_force_host_platform_device_count"
  kept = [w for w in env.get("XLA_FLAGS", "").split() if not w.startswith(flag + "=")]
  env["XLA_FLAGS"] = " ".join(kept + [f"{flag}={n}"])
  env["JAX_PLATFORMS"] = "cpu"


def load_config(spec: str):
  """``path.py[:arg]`` -> the config its ``get_config(arg)`` returns."""
  path, _, arg = spec.partition(":")
  if not Path(path).is_file():
    raise PlanError(f"--config: no config file {path!r}")
  mod_spec = importlib.util.spec_from_file_location(f"plan_config_{Path(path).stem}", path)
  module = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(module)
  try:
    return module.get_config(arg) if arg else module.get_config()
  except (ValueError, KeyError) as e:
    raise PlanError(f"--config {spec}: {e}") from e


def apply_overrides(config, pairs: list[str]) -> None:
  """``--set key.sub=value`` overrides, the value parsed as the field's current type."""
  for pair in pairs:
    key, sep, value = pair.partition("=")
    if not sep:
      raise PlanError(f"--set {pair!r}: expected key=value")
    target, parts = config, key.split(".")
    try:
      for p in parts[:-1]:
        target = target[p]
      name = parts[-1]
      old = target[name]
    except (KeyError, AttributeError) as e:
      raise PlanError(f"--set {pair!r}: the config has no field {key!r}") from e
    try:
      if isinstance(old, bool):
        new: Any = value.lower() in ("1", "true", "yes")
      elif isinstance(old, (int, float, str)):
        new = type(old)(value)
      elif isinstance(old, tuple):
        new = tuple(int(v) for v in value.strip("()").split(",") if v.strip())
      else:
        new = value
    except ValueError as e:
      raise PlanError(f"--set {pair!r}: {e}") from e
    target[name] = new


def model_config(config):
  """The config's `TransformerConfig` without weights: a preset or a directory's config.json."""
  import jax.numpy as jnp

  from spade_jax.models import presets
  from spade_jax.models.config import CheckpointError, from_hf_config

  path = config.model.path
  kw = dict(dtype=jnp.dtype(config.model.dtype), param_dtype=jnp.float32, remat=config.model.remat)
  try:
    if path in presets.PRESETS:
      return presets.preset_config(path, **kw)
    cfg_json = Path(path) / "config.json"
    if cfg_json.is_file():
      return from_hf_config(json.loads(cfg_json.read_text()), **kw)
  except (CheckpointError, ValueError) as e:
    raise PlanError(f"model {path!r}: {e}") from e
  raise PlanError(
    f"model.path={path!r} is neither an architecture preset ({', '.join(presets.PRESETS)}) "
    "nor a directory with a config.json"
  )


# ------------------------------------------------------------------------------------ shapes
@dataclasses.dataclass(frozen=True)
class Shapes:
  """What is compiled: the update's batch / micro-batches / length, the sampler's batch /
  cache slots / prompt slots."""

  batch: int
  micro_batches: int
  seq: int
  sample_batch: int
  context: int
  prompt: int


def _pow2(n: int) -> int:
  return 1 << max(0, int(n) - 1).bit_length()


def agent_context(config) -> int:
  """KV-cache slots of an agent episode: the on-device rollout's, else the host loop's."""
  if config.setting == "games" and config.agent.device_rollout:
    return int(config.agent.device_context)
  return int(config.agent.max_context)


def default_shapes(config, args) -> Shapes:
  """The config's shapes, overridden by the command line. The update's length is
  ``train.seq_len`` or the power-of-two bucket of the longest row a step can produce (the
  designer's and the agent's context)."""
  seq = args.seq or config.train.seq_len
  if not seq:
    seq = _pow2(max(config.designer.max_context, agent_context(config)))
  s = config.spade
  episodes = s.num_games * (s.plays + s.hint_plays)
  wave = int(config.agent.wave_size)  # episodes sampled at once (0: all)
  sample_batch = args.sample_batch or (min(wave, episodes) if wave else episodes)
  context = args.context or agent_context(config)
  prompt = args.prompt or min(
    int(config.agent.device_prompt_len) if config.setting == "games" else 1024, context // 2
  )
  shapes = Shapes(
    batch=args.batch or config.train.global_batch,
    micro_batches=args.micro_batches or config.train.micro_batches,
    seq=int(seq),
    sample_batch=int(sample_batch),
    context=int(context),
    prompt=int(prompt),
  )
  if shapes.batch % shapes.micro_batches:
    raise PlanError(
      f"batch {shapes.batch} is not divisible by micro_batches {shapes.micro_batches}"
    )
  if not 0 < shapes.prompt < shapes.context:
    raise PlanError(f"prompt slots {shapes.prompt} must lie in (0, context={shapes.context})")
  return shapes
