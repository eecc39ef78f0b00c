"""The on-device environment IR: `EnvProgram` (program.py), its ops and interpreter, the
assembly text form, on-device text rendering and answer parsing, and random-draw replay."""
