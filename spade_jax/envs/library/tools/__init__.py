"""Tool-use environment sources (docs/DESIGN.md §3.7), one standalone module per environment.

These files are data: each is the text of a sandbox tool environment that imports its base class
as `from tool_env import ToolEnv`, so they are not importable as package modules. The registry
`spade_jax.envs.library.tool_library` reads them as text (`ToolLibraryEnv.source`) and executes
them for trusted in-process use (`load_local`). This `__init__` only makes packaging ship them.
"""
