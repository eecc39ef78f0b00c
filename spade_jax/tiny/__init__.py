"""spade_jax.tiny: the tiny front end (tokenizer, designer language, grammar mask, assembler)."""
