"""Wire format between the host (sandbox/pool.py) and a sandboxed worker (sandbox/worker.py).

Frames are a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object).
The host writes requests to the worker's stdin and reads replies from its stdout; the worker
moves both pipes to private descriptors at start-up and points fds 0/1 at /dev/null, so
nothing the environment prints can corrupt the stream. Standard library only: the worker
imports this module by file path, outside the package.

Requests (host -> worker), each answered by replies (worker -> host):
  {"op": "init", "config": {...}}            -> {"ok": true, "layers": {...}}
  {"op": "load", "id": N, "source": S, "class_name": C, "kwargs": {...}}
                                             -> {"ok": true, "value": C}
  {"op": "batch", "items": [{"id": N, "method": "reset"|"step"|"solution", "arg": A}, ...]}
                                             -> one reply per item, in order (streamed)
  {"op": "drop", "ids": [N, ...]}            -> {"ok": true}
A failed call replies {"ok": false, "kind": K, "reason": R} with K one of "exception" (the env
raised), "contract" (it returned the wrong shape/type), "violation" (a denied operation,
resource limit or tampering; the host kills the worker). Every reply carries "cpu", the
worker's CPU seconds so far, which the host uses to retire workers before RLIMIT_CPU.
"""

from __future__ import annotations

import json
import struct

HEADER = struct.Struct(">I")


def encode(obj: dict) -> bytes:
  """One frame for `obj` (non-ASCII kept as UTF-8)."""
  data = json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8")
  return HEADER.pack(len(data)) + data


def decode(data: bytes) -> dict:
  """The object in one frame body; raises ValueError on anything but a JSON object."""
  obj = json.loads(data.decode("utf-8"))
  if not isinstance(obj, dict):
    raise ValueError("frame is not a JSON object")
  return obj


class FrameBuffer:
  """Accumulates bytes read from a pipe and yields complete frames; enforces a size cap."""

  def __init__(self, max_frame_bytes: int):
    self.max_frame_bytes = max_frame_bytes
    self.buf = bytearray()

  def feed(self, data: bytes) -> None:
    self.buf += data

  def next_frame(self) -> bytes | None:
    """The next complete frame body, or None; ValueError if a frame exceeds the cap."""
    if len(self.buf) < HEADER.size:
      return None
    (n,) = HEADER.unpack_from(self.buf)
    if n > self.max_frame_bytes:
      raise ValueError(f"reply of {n} bytes exceeds the {self.max_frame_bytes}-byte output cap")
    if len(self.buf) < HEADER.size + n:
      return None
    body = bytes(self.buf[HEADER.size : HEADER.size + n])
    del self.buf[: HEADER.size + n]
    return body
