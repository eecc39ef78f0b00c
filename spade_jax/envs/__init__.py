"""spade_jax.envs."""
