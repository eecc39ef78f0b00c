"""Multi-turn rollouts: on device over `EnvProgram`s (device.py) and on the host over
sandboxed Python environments (host.py), sharing their types and chat framing."""
