"""BFCL-v4 multi-turn plumbing: the data, function docs as tool specs, safe call strings, and
BFCL's own backends and checker run in a per-episode namespace (`eval.bfcl` is the suite).

bfcl-eval is installed with ``--no-deps``, so only modules whose imports the venv satisfies are
used: ``bfcl_eval.constants.{default_prompts, executable_backend_config}`` and
``bfcl_eval.eval_checker.multi_turn_eval.{multi_turn_utils, multi_turn_checker}`` (the backend
classes they load import only the standard library and mpmath). Not imported:
``bfcl_eval.utils`` and ``bfcl_eval.constants.eval_config`` (importing ``eval_config`` creates
``result/``, ``score/`` and ``.file_locks/`` next to site-packages), nor the model handlers and
``eval_checker.eval_runner``/``eval_runner_helper`` (they need tree_sitter, anthropic, ...). What
this module takes from those files is restated here: the data loading of
``utils.populate_test_cases_with_predefined_functions`` and ``add_language_specific_hint_to_
function_doc`` (Python hint), and the OpenAI conversion of ``model_handler.utils.convert_to_tool``.

**Safety.** BFCL executes a call by ``eval`` of a Python call string. `call_string` builds one
only from a function name among the episode's available functions (an identifier) and, per
argument, an identifier name and the ``repr`` of a JSON value (str, int, finite float, bool,
None, list, dict with string keys, nested at most `MAX_DEPTH` deep); anything else is an error
text for the model and is never evaluated.

**State.** BFCL caches backend instances in ``multi_turn_utils``'s module globals under
``{model_name}_{entry_id}_{class}_instance``. `Backends` uses a fresh unique ``model_name`` per
episode (the checker's own instances get ``_eval`` / ``_ground_truth_eval`` after it), and
`Backends.close` (also run when the object is collected) deletes every global with that prefix.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import itertools
import json
import keyword
import math
import os
import re
import uuid
import weakref
from pathlib import Path

import bfcl_eval
from bfcl_eval.constants.executable_backend_config import (
  CLASS_FILE_PATH_MAPPING,
  MULTI_TURN_FUNC_DOC_FILE_MAPPING,
)
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

DATA_DIR = Path(bfcl_eval.__file__).resolve().parent / "data"
VERSION_PREFIX = "BFCL_v4"
CATEGORIES = (
  "multi_turn_base",
  "multi_turn_miss_func",
  "multi_turn_miss_param",
  "multi_turn_long_context",
)
# bfcl_eval.utils._get_language_specific_hint for Python (appended to every function description
# at load; the miss_func held-out docs are removed before, so they never get it)
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
# bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI (the types BFCL's docs use)
OPENAPI_TYPES = {
  "integer": "integer",
  "number": "number",
  "float": "number",
  "string": "string",
  "boolean": "boolean",
  "bool": "boolean",
  "array": "array",
  "list": "array",
  "dict": "object",
  "object": "object",
  "tuple": "array",
  "any": "string",
}
MAX_DEPTH = 16
VERDICT_CHARS = 300
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_EPISODES = itertools.count()


# -- data ------------------------------------------------------------------------------------


def load_jsonl(path: Path) -> list[dict]:
  """A BFCL data file (one JSON object per line), in file order."""
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


@functools.cache
def category_entries(category: str) -> tuple[dict, ...]:
  """The entries of one category, each with its ``ground_truth`` (per-turn call strings)."""
  if category not in CATEGORIES:
    raise ValueError(f"unknown BFCL multi-turn category {category!r}; known: {CATEGORIES}")
  entries = load_jsonl(DATA_DIR / f"{VERSION_PREFIX}_{category}.json")
  answers = load_jsonl(DATA_DIR / "possible_answer" / f"{VERSION_PREFIX}_{category}.json")
  if [e["id"] for e in entries] != [a["id"] for a in answers]:
    raise ValueError(f"BFCL {category}: entries and possible answers are not aligned")
  return tuple({**e, "ground_truth": a["ground_truth"]} for e, a in zip(entries, answers))


@functools.cache
def _class_docs(class_name: str) -> tuple[dict, ...]:
  return tuple(
    load_jsonl(DATA_DIR / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name])
  )


@functools.cache
def backend_class(class_name: str) -> type:
  return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


def entry_functions(entry: dict) -> tuple[list[dict], dict[int, list[dict]]]:
  """(the docs available from the start, with the Python hint; {turn: the docs added then}) as
  BFCL's loader builds them: every involved class's docs, minus ``missed_function``'s
  (``excluded_function`` is unused by BFCL and ignored here too)."""
  docs = [copy.deepcopy(d) for c in entry["involved_classes"] for d in _class_docs(c)]
  held: dict[int, list[dict]] = {}
  for turn, names in (entry.get("missed_function") or {}).items():
    held[int(turn)] = []
    for name in names:
      for i, doc in enumerate(docs):
        if doc["name"] == name:
          held[int(turn)].append(docs.pop(i))
          break
  for doc in docs:
    doc["description"] = doc["description"] + PYTHON_HINT
  return docs, held


def _cast(schema: dict, described: bool) -> dict:
  """One parameter schema with BFCL's types mapped to OpenAPI (float: ``format`` and a note)."""
  out = dict(schema)
  kind = out.get("type")
  if kind is None:
    out["type"] = "string"
  else:
    if kind == "float" and described:
      out["format"] = "float"
      out["description"] = out.get("description", "") + " This is a float type value."
    out["type"] = OPENAPI_TYPES.get(kind, "string")
  if isinstance(out.get("properties"), dict):
    out["properties"] = {k: _cast(v, True) for k, v in out["properties"].items()}
  if isinstance(out.get("items"), dict):
    out["items"] = _cast(out["items"], False)
  return out


def tool_spec(doc: dict) -> dict:
  """A BFCL function doc as an OpenAI function spec (BFCL's ``convert_to_tool``; the response
  schema is folded into the description, as BFCL does for APIs without a response field)."""
  params = dict(doc.get("parameters") or {})
  params["type"] = "object"
  params["properties"] = {k: _cast(v, True) for k, v in (params.get("properties") or {}).items()}
  description = doc.get("description", "")
  if "response" in doc:
    description += f" The response field has the following schema: {json.dumps(doc['response'])}"
  return {
    "type": "function",
    "function": {"name": doc["name"], "description": description, "parameters": params},
  }


def backend_methods(class_names: list[str]) -> dict[str, inspect.Signature]:
  """Public method name -> signature (without ``self``) over the involved backend classes."""
  out = {}
  for c in class_names:
    for name, fn in inspect.getmembers(backend_class(c), inspect.isfunction):
      if not name.startswith("_"):
        sig = inspect.signature(fn)
        out[name] = sig.replace(parameters=list(sig.parameters.values())[1:])
  return out


# -- calls -----------------------------------------------------------------------------------


def _json_value_problem(value, depth: int = 0) -> str | None:
  if depth > MAX_DEPTH:
    return f"values may nest at most {MAX_DEPTH} deep"
  if value is None or isinstance(value, str | bool | int):
    return None
  if isinstance(value, float):
    return None if math.isfinite(value) else "numbers must be finite"
  if isinstance(value, list):
    return next((p for v in value if (p := _json_value_problem(v, depth + 1))), None)
  if isinstance(value, dict):
    if not all(isinstance(k, str) for k in value):
      return "object keys must be strings"
    return next((p for v in value.values() if (p := _json_value_problem(v, depth + 1))), None)
  return f"{type(value).__name__} is not a JSON value"


def is_identifier(name) -> bool:
  return isinstance(name, str) and bool(_IDENT.match(name)) and not keyword.iskeyword(name)


def call_string(name, arguments, available) -> tuple[str | None, str | None]:
  """(BFCL's call string ``name(k=repr(v),...)``, None) or (None, the error for the model)."""
  if not is_identifier(name) or name not in available:
    shown = str(name)[:60]
    return None, f"Error: unknown function {shown!r} (available: {', '.join(sorted(available))})"
  if not isinstance(arguments, dict):
    return None, f"Error: the arguments of {name} must be a JSON object"
  for key, value in arguments.items():
    if not is_identifier(key):
      return None, f"Error: {name}: argument name {str(key)[:60]!r} is not an identifier"
    problem = _json_value_problem(value)
    if problem is not None:
      return None, f"Error: {name}: argument {key}: {problem}"
  return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})", None


def parse_call(text: str, methods: dict[str, inspect.Signature]) -> tuple[str, dict]:
  """A ground-truth call string (``cd(folder='document')``, literals only; positional arguments
  named by the backend method's signature) -> (name, arguments)."""
  node = ast.parse(text.strip(), mode="eval").body
  if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
    raise ValueError(f"not a plain function call: {text!r}")
  name = node.func.id
  names = list(methods[name].parameters) if node.args else []
  if len(node.args) > len(names):
    raise ValueError(f"too many positional arguments: {text!r}")
  args = {names[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
  for kw in node.keywords:
    if kw.arg is None:
      raise ValueError(f"**kwargs in a ground-truth call: {text!r}")
    args[kw.arg] = ast.literal_eval(kw.value)
  return name, args


# -- backends --------------------------------------------------------------------------------


def forget(prefix: str) -> None:
  """Delete BFCL's cached instances whose names start with ``prefix``."""
  cache = vars(multi_turn_utils)
  for key in [k for k in list(cache) if k.startswith(prefix)]:
    cache.pop(key, None)


def trim_verdict(verdict: dict) -> dict:
  """The checker's verdict, small: valid, error_type, error_message (trimmed)."""
  out = {"valid": bool(verdict.get("valid"))}
  if not out["valid"]:
    out["error_type"] = str(verdict.get("error_type", ""))
    message = verdict.get("error_message", "")
    message = " ".join(message) if isinstance(message, list) else str(message)
    out["error_message"] = message[:VERDICT_CHARS]
  return out


class Backends:
  """BFCL's backend instances of one episode of ``entry`` (a unique instance namespace)."""

  def __init__(self, entry: dict, category: str):
    self.entry = entry
    self.long_context = "long_context" in category
    self.model_name = f"spade_bfcl_{os.getpid()}_{next(_EPISODES)}_{uuid.uuid4().hex[:8]}"
    self._finalizer = weakref.finalize(self, forget, self.model_name + "_")
    self.run([])  # load the scenario now (as BFCL's inference loop does before the first turn)

  def run(self, calls: list[str]) -> list[str]:
    """Execute call strings built by `call_string` (in order); one result text per call."""
    results, _ = multi_turn_utils.execute_multi_turn_func_call(
      calls,
      self.entry.get("initial_config", {}),
      self.entry["involved_classes"],
      self.model_name,
      self.entry["id"],
      long_context=self.long_context,
      is_evaL_run=False,
    )
    return [str(r) for r in results]

  def check(self, decoded: list[list[list[str]]]) -> dict:
    """BFCL's `multi_turn_checker` on the per-turn, per-step call lists (trimmed verdict)."""
    entry = {k: self.entry[k] for k in ("id", "initial_config", "involved_classes")}
    category = self.entry["id"].rsplit("_", 1)[0]
    try:
      verdict = multi_turn_checker(
        decoded, self.entry["ground_truth"], entry, category, self.model_name
      )
    except Exception as e:  # noqa: BLE001 - a checker crash grades the episode invalid
      verdict = {
        "valid": False,
        "error_type": "multi_turn:checker_error",
        "error_message": f"{type(e).__name__}: {e}",
      }
    finally:
      forget(self.model_name + "_")
    return trim_verdict(verdict)

  def close(self) -> None:
    self._finalizer()
