"""The generation engine: sampling, prefill, the decode loop, forced-token chunks and KV caches.

`generate.Engine` is the entry point; it knows models and tokens, never environments.
"""
