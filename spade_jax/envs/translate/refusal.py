"""Translator: `Refusal` -- the source is outside what the translator lowers (``line N: ...``)."""

from __future__ import annotations

import ast


class Refusal(Exception):
  """The source is outside the translatable subset: ``line N: <construct> ...``."""

  def __init__(self, msg: str, node: ast.AST | None = None):
    super().__init__(msg)
    self.msg = msg
    self.line = getattr(node, "lineno", None)

  def __str__(self) -> str:
    return f"line {self.line}: {self.msg}" if self.line else self.msg


def snippet(node: ast.AST, limit: int = 60) -> str:
  """Source text of ``node`` for messages (shortened)."""
  try:
    text = ast.unparse(node)
  except Exception:  # noqa: BLE001 - only for messages
    text = type(node).__name__
  return text if len(text) <= limit else text[: limit - 3] + "..."
