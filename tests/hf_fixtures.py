"""Offline builders for tests: tiny random HF models (saved with save_pretrained) and a small
byte-level BPE tokenizer with a ChatML chat template. Nothing is downloaded."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

CHATML_TEMPLATE = (
  "{% for message in messages %}"
  "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
  "{% endfor %}"
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
  "The agent answers in \\boxed{42}. Guess the number between 1 and 100.",
  "Your guess is too high. Your guess is too low. Correct! The answer is \\boxed{-17}.",
  "Compute the sum of 3, 5, 7 and 11. Sort the list: 9, 2, 6, 4. Answer: \\boxed{2, 4, 6, 9}.",
  "You are an expert designer of interactive multi-turn text games. def reset(self, seed=None):",
  "import random\nclass GuessEnv:\n    def step(self, action):\n        return obs, 1.0, True, False, {}",
  "HINT: think about the remainder modulo 7. The greatest common divisor of 12 and 18 is 6.",
  "0123456789 +-*/%=<>()[]{},.;:!?'\"#&|^~_@$ abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "Ünïcödé tèxt, emoji 🎲 and tabs\tand newlines\n\n done.",
]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@functools.lru_cache(maxsize=4)
def tiny_tokenizer_dir(vocab_size: int = 512) -> str:
  """Trains (deterministically, offline) a byte-level BPE tokenizer and saves it as an HF dir."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast

  tok = Tokenizer(models.BPE())
  # Digits are split individually (as in Qwen / SmolLM2 vocabularies) so numbers tokenise the
  # same way wherever they appear.
  tok.pre_tokenizer = pre_tokenizers.Sequence(
    [
      pre_tokenizers.Digits(individual_digits=True),
      pre_tokenizers.ByteLevel(add_prefix_space=False),
    ]
  )
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=SPECIAL_TOKENS,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
  )
  tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
  hf = PreTrainedTokenizerFast(
    tokenizer_object=tok,
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    bos_token=None,
    additional_special_tokens=["<|im_start|>"],
  )
  hf.chat_template = CHATML_TEMPLATE
  out = Path(tempfile.mkdtemp(prefix="spade_tok_"))
  hf.save_pretrained(str(out))
  return str(out)


def hf_config(kind: str, **overrides):
  """Tiny random configs covering each supported architecture's special features."""
  from transformers import LlamaConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig

  if kind == "qwen3":  # qk-norm, head_dim != hidden/heads, GQA ratio 3, untied
    kw = dict(
      vocab_size=1031,
      hidden_size=64,
      intermediate_size=112,
      num_hidden_layers=2,
      num_attention_heads=6,
      num_key_value_heads=2,
      head_dim=16,
      rope_theta=10000.0,
      tie_word_embeddings=False,
      rms_norm_eps=1e-6,
    )
    cls = Qwen3Config
  elif kind == "qwen2":  # qkv bias, tied
    kw = dict(
      vocab_size=1009,
      hidden_size=64,
      intermediate_size=96,
      num_hidden_layers=2,
      num_attention_heads=4,
      num_key_value_heads=2,
      rope_theta=10000.0,
      tie_word_embeddings=True,
      rms_norm_eps=1e-6,
    )
    cls = Qwen2Config
  elif kind in ("llama", "llama_tied"):  # rope_theta != 10000
    kw = dict(
      vocab_size=997,
      hidden_size=64,
      intermediate_size=128,
      num_hidden_layers=2,
      num_attention_heads=4,
      num_key_value_heads=4 if kind == "llama" else 1,
      rope_theta=50000.0,
      tie_word_embeddings=kind == "llama_tied",
      rms_norm_eps=1e-5,
    )
    cls = LlamaConfig
  elif kind == "qwen3_moe":  # qk-norm, 4 experts top-2, dense width != expert width, untied
    kw = dict(
      vocab_size=1013,
      hidden_size=64,
      intermediate_size=96,
      moe_intermediate_size=40,
      num_experts=4,
      num_experts_per_tok=2,
      norm_topk_prob=True,
      num_hidden_layers=2,
      num_attention_heads=4,
      num_key_value_heads=2,
      head_dim=16,
      rope_theta=10000.0,
      tie_word_embeddings=False,
      rms_norm_eps=1e-6,
    )
    cls = Qwen3MoeConfig
  else:
    raise ValueError(kind)
  kw.update(overrides)
  return cls(**kw)


def make_hf_model(kind: str, seed: int = 0, **overrides):
  """A random transformers PyTorch model (eval mode, float32) of the given kind."""
  import torch
  from transformers import AutoModelForCausalLM

  torch.manual_seed(seed)
  model = AutoModelForCausalLM.from_config(hf_config(kind, **overrides))
  with torch.no_grad():  # make norms/biases non-trivial so they are really tested
    for name, p in model.named_parameters():
      if "norm" in name or name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
  return model.eval()


def save_hf_model(kind: str, seed: int = 0, **overrides) -> tuple[str, object]:
  model = make_hf_model(kind, seed, **overrides)
  out = tempfile.mkdtemp(prefix=f"spade_{kind}_")
  model.save_pretrained(out)
  return out, model
