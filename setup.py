"""spade_jax: SPADE (self-play in adaptive synthetic executable environments) in JAX.

Every dependency is pinned exactly (see BUILD_NOTES.md for why each pin exists).
"""

from setuptools import find_packages, setup

INSTALL_REQUIRES = [
  "jax==0.10.2",
  "jaxlib==0.10.2",
  "flax==0.12.8",
  "optax==0.2.8",
  "orbax-checkpoint==0.12.8",
  "chex==0.1.92",
  "numpy==2.4.6",
  "ml_collections==1.1.0",
  "absl-py==2.5.1",
  "transformers==5.24.0",
  "tokenizers==0.23.3",
  "safetensors==0.8.0",
  "huggingface_hub==2.4.0",
  "jinja2==3.1.6",
  "tensorboardX==2.6.5",
  "matplotlib==3.11.2",
  "tqdm==4.70.1",
  "gymnax==1.0.1",
  "six==1.17.0",
  "reasoning_gym==0.1.25",
]

# Reading GGUF checkpoints goes through transformers' GGUF reader, which needs torch.
GGUF = [
  "torch==2.13.0",
  "gguf==0.19.0",
  "accelerate==1.16.0",
]

TEST = GGUF + [
  "pytest==9.2.0",
  "ruff==0.17.6",
  "nbclient==0.11.0",
  "nbformat==5.11.1",
  "ipykernel==7.4.0",
]

setup(
  name="spade_jax",
  version="0.1.0",
  description="SPADE in JAX: one LLM designs executable environments and learns in them.",
  packages=find_packages(include=["spade_jax", "spade_jax.*"]),
  package_data={"spade_jax": ["**/*.asm", "**/*.jsonl", "**/*.json", "**/*.txt"]},
  python_requires=">=3.10",
  install_requires=INSTALL_REQUIRES,
  extras_require={
    "gguf": GGUF,
    "test": TEST,
    "tpu": ["jax[tpu]==0.10.2"],
    "gpu": ["jax[cuda13]==0.10.2"],
  },
)
