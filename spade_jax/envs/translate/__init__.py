"""Python environment -> `EnvProgram` lowering, accepted only after a differential check
against the sandboxed original (pipeline.py is the entry point)."""
