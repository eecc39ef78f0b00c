"""spade_jax: SPADE (one LLM designs executable environments and learns in them) in JAX."""

__version__ = "0.1.0"
