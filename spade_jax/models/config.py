"""TransformerConfig and its translation from / to Hugging Face ``config.json``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from spade_jax.models.rope import PARAMETERS, SCALING_TYPES, RopeScaling

SUPPORTED_MODEL_TYPES = ("qwen3", "qwen3_moe", "qwen2", "llama")
ATTENTION_IMPLS = ("reference", "xla", "cudnn", "auto")

# HF config fields that change the computation and that this model does not implement. A
# checkpoint that sets them to a non-default value is refused instead of silently mis-modelled.
_UNSUPPORTED_IF_SET = {
  "sliding_window": (None,),
  "pretraining_tp": (None, 1),
  "mlp_bias": (None, False),
  "attention_dropout": (None, 0, 0.0),
  "layer_types": None,  # checked separately (only full attention)
}


_MOE_FIELDS = (
  "num_experts",
  "num_experts_per_tok",
  "moe_mlp_dim",
  "norm_topk_prob",
  "decoder_sparse_step",
  "mlp_only_layers",
  "router_aux_loss_coef",
)


class CheckpointError(ValueError):
  """A checkpoint that cannot be loaded exactly (missing / extra / mis-shaped / corrupt /
  unsupported)."""


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Architecture of a decoder-only transformer (Llama / Qwen2 / Qwen3 family).

  Symbols used in tensor-name suffixes: B batch, T length, S cache length, D embed_dim,
  N num_heads, K num_kv_heads, H head_dim, F mlp_dim, V vocab_size, L num_layers.
  """

  vocab_size: int
  embed_dim: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  mlp_dim: int
  rope_theta: float = 10000.0
  rms_eps: float = 1e-6
  qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
  qkv_bias: bool = False  # Qwen2: bias on q/k/v projections
  tie_embeddings: bool = False
  max_position: int = 32768
  model_type: str = "llama"
  # RoPE scaling (linear / dynamic / yarn / llama3, as transformers); None: the default RoPE.
  rope_scaling: RopeScaling | None = None
  # Numerics: parameters are stored in param_dtype; matmuls run in dtype and accumulate in f32.
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  # Rematerialisation of each block in the backward pass: "none", "full" or "dots".
  remat: str = "none"
  # Queries are processed in chunks of this many positions when longer (0: never chunk);
  # "reference" and "xla" attention only.
  attention_chunk: int = 512
  # Training / prefill attention (spade_jax.models.block.attention): "reference" (einsum +
  # softmax), "xla" / "cudnn" (jax.nn.dot_product_attention's implementations), "auto" (cuDNN
  # on a GPU where it applies, else XLA). Decode steps always use the reference einsums.
  attention_impl: str = "reference"
  bos_token_id: int | None = None
  eos_token_id: int | list[int] | None = None
  pad_token_id: int | None = None
  # Qwen3-MoE (num_experts 0: dense). Layer i is sparse (router + experts of width moe_mlp_dim)
  # unless i is in mlp_only_layers or (i + 1) % decoder_sparse_step; dense layers use mlp_dim.
  num_experts: int = 0
  num_experts_per_tok: int = 0
  moe_mlp_dim: int = 0
  norm_topk_prob: bool = False
  decoder_sparse_step: int = 1
  mlp_only_layers: tuple[int, ...] = ()
  router_aux_loss_coef: float = 0.001

  def __post_init__(self):
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
      )
    if self.head_dim % 2:
      raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
    if self.remat not in ("none", "full", "dots"):
      raise ValueError(f"remat must be none|full|dots, got {self.remat!r}")
    if self.attention_impl not in ATTENTION_IMPLS:
      raise ValueError(
        f"attention_impl must be one of {'|'.join(ATTENTION_IMPLS)}, got {self.attention_impl!r}"
      )
    if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
      raise ValueError(f"rope_scaling must be a RopeScaling or None, got {self.rope_scaling!r}")
    object.__setattr__(self, "mlp_only_layers", tuple(int(i) for i in self.mlp_only_layers))
    if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
      raise ValueError(
        f"num_experts_per_tok={self.num_experts_per_tok} must be in [1, {self.num_experts}]"
      )
    if self.num_experts and (self.moe_mlp_dim <= 0 or self.decoder_sparse_step <= 0):
      raise ValueError("an MoE config needs moe_mlp_dim > 0 and decoder_sparse_step > 0")

  @property
  def sparse_layers(self) -> tuple[bool, ...]:
    """Per layer: True where the MLP is the MoE one (transformers' Qwen3-MoE rule)."""
    return tuple(
      self.num_experts > 0
      and i not in self.mlp_only_layers
      and (i + 1) % self.decoder_sparse_step == 0
      for i in range(self.num_layers)
    )

  def replace(self, **kw) -> TransformerConfig:
    return dataclasses.replace(self, **kw)

  @property
  def num_params(self) -> int:
    d, h, n, k, f, v = (
      self.embed_dim,
      self.head_dim,
      self.num_heads,
      self.num_kv_heads,
      self.mlp_dim,
      self.vocab_size,
    )
    attn = d * n * h * 2 + d * k * h * 2 + (n * h + 2 * k * h if self.qkv_bias else 0)
    attn += 2 * h if self.qk_norm else 0
    n_sparse = sum(self.sparse_layers)
    moe = self.num_experts * 3 * d * self.moe_mlp_dim + d * self.num_experts
    mlps = (self.num_layers - n_sparse) * 3 * d * f + n_sparse * moe
    return self.num_layers * (attn + 2 * d) + mlps + v * d * (1 if self.tie_embeddings else 2) + d

  def flops_per_token(self, seq_len: int) -> float:
    """Forward matmul FLOPs per token (2 per MAC), attention included (causal average)."""
    d, h, n, k, f = self.embed_dim, self.head_dim, self.num_heads, self.num_kv_heads, self.mlp_dim
    proj = 2 * d * (2 * n * h + 2 * k * h)
    attn = 2 * 2 * n * h * seq_len / 2
    n_sparse = sum(self.sparse_layers)  # active experts only
    moe = 2 * (3 * d * self.moe_mlp_dim * self.num_experts_per_tok + d * self.num_experts)
    mlps = (self.num_layers - n_sparse) * 2 * 3 * d * f + n_sparse * moe
    return self.num_layers * (proj + attn) + mlps + 2 * d * self.vocab_size

  def to_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out["dtype"] = jnp.dtype(self.dtype).name
    out["param_dtype"] = jnp.dtype(self.param_dtype).name
    if self.rope_scaling is None:  # keeps default-RoPE configs equal to those saved before
      del out["rope_scaling"]
    if not self.num_experts:  # likewise for dense configs
      for f in _MOE_FIELDS:
        del out[f]
    else:
      out["mlp_only_layers"] = list(self.mlp_only_layers)
    return out

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> TransformerConfig:
    d = dict(d)
    for key in ("dtype", "param_dtype"):
      if key in d and isinstance(d[key], str):
        d[key] = jnp.dtype(d[key])
    if isinstance(d.get("rope_scaling"), dict):
      d["rope_scaling"] = RopeScaling(**d["rope_scaling"])
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
      raise ValueError(f"unknown TransformerConfig fields: {unknown}")
    return cls(**d)


def _rope(hf: dict[str, Any]) -> tuple[float, RopeScaling | None]:
  """``(rope_theta, rope_scaling)`` from the HF rope fields, read as transformers v5 does: the
  legacy ``rope_scaling`` dict wins over ``rope_parameters``; ``rope_type`` over ``type``; a
  top-level ``original_max_position_embeddings`` over the dict's (llama3, yarn), which defaults
  to ``max_position_embeddings``; a yarn ``factor`` left None is their ratio."""
  params = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
  theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
  kind = params.get("rope_type", params.get("type", "default"))
  partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor"))
  if partial not in (None, 1, 1.0):
    raise CheckpointError(f"unsupported RoPE partial_rotary_factor={partial!r}")
  if kind in (None, "default"):
    return theta, None
  if kind not in SCALING_TYPES:
    raise CheckpointError(
      f"unsupported rope scaling type {kind!r} (supported: default, {', '.join(SCALING_TYPES)})"
    )
  max_position = int(hf.get("max_position_embeddings", 32768))
  if kind in ("llama3", "yarn"):
    if "original_max_position_embeddings" in hf:
      params["original_max_position_embeddings"] = hf["original_max_position_embeddings"]
    params.setdefault("original_max_position_embeddings", max_position)
  if kind == "yarn" and params.get("factor") is None and "factor" in params:
    params["factor"] = max_position / params["original_max_position_embeddings"]
  reads, _ = PARAMETERS[kind]
  kw = {k: params[k] for k in reads if params.get(k) is not None}
  for k, v in kw.items():
    if k == "truncate":
      kw[k] = bool(v)
    elif k == "original_max_position_embeddings":
      kw[k] = int(v)
    elif isinstance(v, bool) or not isinstance(v, int | float):
      raise CheckpointError(f"rope scaling {kind!r}: {k}={v!r} is not a number")
    else:
      kw[k] = float(v)
  try:
    return theta, RopeScaling(rope_type=kind, **kw)
  except ValueError as e:
    raise CheckpointError(f"rope scaling {kind!r}: {e}") from e


def _hf_rope_parameters(cfg: TransformerConfig) -> dict[str, Any]:
  scaling = cfg.rope_scaling
  if scaling is None:
    return {"rope_type": "default", "rope_theta": cfg.rope_theta}
  given = {k: v for k, v in scaling.parameters().items() if v is not None}
  return {"rope_type": scaling.rope_type, "rope_theta": cfg.rope_theta, **given}


def from_hf_config(hf: dict[str, Any], **overrides) -> TransformerConfig:
  """Builds a TransformerConfig from an HF ``config.json`` dict (qwen3, qwen2, llama)."""
  model_type = hf.get("model_type")
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise CheckpointError(
      f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
    )
  act = hf.get("hidden_act", "silu")
  if act != "silu":
    raise CheckpointError(f"unsupported hidden_act {act!r} (only silu / SwiGLU is implemented)")
  for field, allowed in _UNSUPPORTED_IF_SET.items():
    if field == "layer_types":
      lt = hf.get("layer_types")
      if lt and any(t != "full_attention" for t in lt):
        raise CheckpointError(f"unsupported layer_types {sorted(set(lt))} (only full_attention)")
      continue
    value = hf.get(field)
    if value not in allowed:
      if field == "sliding_window" and not hf.get("use_sliding_window", False):
        continue
      raise CheckpointError(f"unsupported config field {field}={value!r}")
  if model_type == "qwen2" and hf.get("use_sliding_window", False):
    raise CheckpointError("unsupported config field use_sliding_window=True")
  for key in (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
  ):
    if key not in hf:
      raise CheckpointError(f"config.json lacks required field {key!r}")
  theta, scaling = _rope(hf)
  n = hf["num_attention_heads"]
  head_dim = hf.get("head_dim") or hf["hidden_size"] // n
  if model_type == "qwen2":
    qkv_bias = True
  else:
    qkv_bias = bool(hf.get("attention_bias", False))
  kw = dict(
    vocab_size=hf["vocab_size"],
    embed_dim=hf["hidden_size"],
    num_layers=hf["num_hidden_layers"],
    num_heads=n,
    num_kv_heads=hf.get("num_key_value_heads") or n,
    head_dim=head_dim,
    mlp_dim=hf["intermediate_size"],
    rope_theta=theta,
    rope_scaling=scaling,
    rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
    qk_norm=model_type in ("qwen3", "qwen3_moe"),
    qkv_bias=qkv_bias,
    tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
    max_position=int(hf.get("max_position_embeddings", 32768)),
    model_type=model_type,
    bos_token_id=hf.get("bos_token_id"),
    eos_token_id=hf.get("eos_token_id"),
    pad_token_id=hf.get("pad_token_id"),
  )
  if model_type == "qwen3_moe":
    kw.update(_hf_moe(hf))
  kw.update(overrides)
  return TransformerConfig(**kw)


def _hf_moe(hf: dict[str, Any]) -> dict[str, Any]:
  """The MoE fields of a qwen3_moe ``config.json`` (transformers writes ``num_experts`` as
  ``num_local_experts``)."""
  experts = hf.get("num_experts", hf.get("num_local_experts"))
  for key, value in (("num_experts", experts), ("moe_intermediate_size", None)):
    if (value if key == "num_experts" else hf.get(key)) is None:
      raise CheckpointError(f"qwen3_moe config.json lacks required field {key!r}")
  return dict(
    num_experts=int(experts),
    num_experts_per_tok=int(hf.get("num_experts_per_tok", 8)),
    moe_mlp_dim=int(hf["moe_intermediate_size"]),
    norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
    decoder_sparse_step=int(hf.get("decoder_sparse_step", 1)),
    mlp_only_layers=tuple(hf.get("mlp_only_layers") or ()),
    router_aux_loss_coef=float(hf.get("router_aux_loss_coef", 0.001)),
  )


def to_hf_config(cfg: TransformerConfig) -> dict[str, Any]:
  """The HF ``config.json`` dict for ``cfg`` (loadable by transformers' AutoConfig)."""
  arch = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "llama": "LlamaForCausalLM",
  }
  if cfg.model_type not in arch:
    raise ValueError(f"cannot export model_type {cfg.model_type!r}")
  if (cfg.model_type == "qwen3_moe") != bool(cfg.num_experts):
    raise ValueError("experts (num_experts > 0) are exported as qwen3_moe, and only they are")
  if cfg.model_type in ("qwen3", "qwen3_moe") and not cfg.qk_norm:
    raise ValueError(f"a {cfg.model_type} export requires qk_norm=True")
  if cfg.model_type not in ("qwen3", "qwen3_moe") and cfg.qk_norm:
    raise ValueError(f"{cfg.model_type} has no qk-norm; export as qwen3")
  if cfg.model_type == "qwen2" and not cfg.qkv_bias:
    raise ValueError("a qwen2 export requires qkv_bias=True")
  out = {
    "architectures": [arch[cfg.model_type]],
    "model_type": cfg.model_type,
    "vocab_size": cfg.vocab_size,
    "hidden_size": cfg.embed_dim,
    "num_hidden_layers": cfg.num_layers,
    "num_attention_heads": cfg.num_heads,
    "num_key_value_heads": cfg.num_kv_heads,
    "head_dim": cfg.head_dim,
    "intermediate_size": cfg.mlp_dim,
    "hidden_act": "silu",
    "rms_norm_eps": cfg.rms_eps,
    "rope_theta": cfg.rope_theta,
    "rope_parameters": _hf_rope_parameters(cfg),
    "tie_word_embeddings": cfg.tie_embeddings,
    "max_position_embeddings": cfg.max_position,
    "torch_dtype": jnp.dtype(cfg.param_dtype).name,
    "bos_token_id": cfg.bos_token_id,
    "eos_token_id": cfg.eos_token_id,
    "pad_token_id": cfg.pad_token_id,
  }
  if cfg.model_type == "llama":
    out["attention_bias"] = cfg.qkv_bias
    out["mlp_bias"] = False
  if cfg.model_type in ("qwen3", "qwen3_moe"):
    out["attention_bias"] = cfg.qkv_bias
  if cfg.model_type == "qwen3_moe":
    out.update(
      num_experts=cfg.num_experts,
      num_experts_per_tok=cfg.num_experts_per_tok,
      moe_intermediate_size=cfg.moe_mlp_dim,
      norm_topk_prob=cfg.norm_topk_prob,
      decoder_sparse_step=cfg.decoder_sparse_step,
      mlp_only_layers=list(cfg.mlp_only_layers),
      router_aux_loss_coef=cfg.router_aux_loss_coef,
      use_sliding_window=False,
    )
  return out
