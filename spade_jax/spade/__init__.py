"""spade_jax.spade."""
