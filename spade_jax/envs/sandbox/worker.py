"""A sandboxed worker process: loads untrusted environment modules and steps them on request.

Started by sandbox/pool.py as `python -S -s -B [-P] sandbox/worker.py` (a script, not `-m`, so it
imports nothing from the package or site-packages: only the standard library and its four
sibling modules lockdown, policy, protocol and tool_env, found by appending this directory to the
end of sys.path), in its own session and process group, with a scrubbed environment and a
private scratch directory as cwd.

Start-up: move the protocol pipes to private fds and point fds 0/1 at /dev/null; read the
`init` request; pre-import the allowed modules (json and the sibling `tool_env` included);
apply lockdown.py (rlimits, privilege drop, seccomp, audit hook, tamper snapshot of the allowed
modules and their classes, `tool_env.ToolEnv` and json's among them); reply with the layers in
force. Then serve requests (see sandbox/protocol.py) until stdin closes.

Each environment instance gets its own module namespace: a fresh `__builtins__` without the
dangerous builtins (policy.FORBIDDEN_BUILTINS), safe getattr/setattr/delattr, a
restricted `__import__` that only hands out read-only views of the allowed modules (public,
non-module attributes only: `re.enum.sys` does not exist; `from tool_env import ToolEnv`
gets the one shared, fingerprinted ToolEnv class), and a `random` view bound to a
private `random.Random`, so instances never share random state and interleaving does not
change any instance's draws. Stdlib helpers that would call the real getattr with a name the
environment chooses (`string.Formatter`, `functools.update_wrapper(assigned=...)`) are removed
or fenced, since they would return any object reachable from an attribute path.

`solution()` of a game returns a str; of a ToolEnv instance, a list of 1..`MAX_SOLUTION_TURNS`
strings (the agent turns), each capped like an observation.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import os
import sys
import time

sys.path.append(os.path.dirname(os.path.abspath(__file__)))

import lockdown as sandbox_lockdown  # noqa: E402
import policy  # noqa: E402
import protocol as proto  # noqa: E402
import tool_env  # noqa: E402

ENV_MODULE = "env"
_MODULES = ("random", "re", "math", "itertools", "collections", "functools", "string", "json",
            "tool_env")  # fmt: skip
# Imported so that lazily imported helpers of the allowed modules are already loaded.
_HELPERS = ("collections.abc", "heapq", "bisect", "copy", "operator", "keyword", "reprlib",
            "weakref", "types", "numbers", "__future__", "encodings.idna", "unicodedata")  # fmt: skip


class ModuleView:
  """Read-only view of an allowed module: its public, non-module attributes."""

  __slots__ = ("_name", "_attrs")

  def __init__(self, name: str, attrs: dict):
    object.__setattr__(self, "_name", name)
    object.__setattr__(self, "_attrs", attrs)

  def __getattr__(self, attr):
    try:
      return object.__getattribute__(self, "_attrs")[attr]
    except KeyError:
      name = object.__getattribute__(self, "_name")
      raise AttributeError(f"module '{name}' has no attribute '{attr}'") from None

  def __setattr__(self, attr, value):
    raise AttributeError(f"module '{self._name}' is read-only in the sandbox")

  def __delattr__(self, attr):
    raise AttributeError(f"module '{self._name}' is read-only in the sandbox")

  def __dir__(self):
    return sorted(object.__getattribute__(self, "_attrs"))

  def __repr__(self):
    return f"<module '{object.__getattribute__(self, '_name')}'>"


def _public_attrs(mod) -> dict:
  return {k: v for k, v in vars(mod).items() if not k.startswith("_") and type(v) is not type(sys)}


class Namespaces:
  """Builds per-instance module namespaces (restricted builtins, imports, module views)."""

  def __init__(self, restricted: bool):
    import builtins
    import random

    self.restricted = restricted
    self.random = random
    self.views = {}
    for name in _MODULES + ("collections.abc", "__future__"):
      self.views[name] = ModuleView(name, _public_attrs(sys.modules[name]))
    self.views["collections"]._attrs["abc"] = self.views["collections.abc"]
    # Stdlib helpers that call the real getattr with a caller-chosen name would hand out any
    # object (string.Formatter().get_field("0.__init__.__globals__", ...)): removed or fenced.
    del self.views["string"]._attrs["Formatter"]
    self.views["functools"]._attrs.update(update_wrapper=_safe_update_wrapper, wraps=_safe_wraps)
    base = dict(vars(builtins))
    for name in policy.FORBIDDEN_BUILTINS | {"__loader__", "__spec__", "__package__"}:
      base.pop(name, None)
    base.update(getattr=_safe_getattr, setattr=_safe_setattr, delattr=_safe_delattr, print=_print)
    self.base_builtins = base
    self.real_builtins = vars(builtins)

  def random_view(self):
    rng = self.random.Random()
    shared = self.random._inst
    attrs = {}
    for k, v in self.views["random"]._attrs.items():
      attrs[k] = getattr(rng, k) if getattr(v, "__self__", None) is shared else v
    return ModuleView("random", attrs)

  def new(self) -> dict:
    """A fresh global namespace for one environment instance."""
    if not self.restricted:
      return {"__name__": ENV_MODULE, "__builtins__": self.real_builtins}
    views = dict(self.views, random=self.random_view())

    def restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
      if level:
        raise ImportError("relative imports are not allowed in the sandbox")
      if not policy.import_allowed(name):
        raise ImportError(f"import of module '{name}' is not allowed in the sandbox")
      return views[name] if fromlist else views[name.partition(".")[0]]

    b = dict(self.base_builtins, __import__=restricted_import)
    return {"__name__": ENV_MODULE, "__builtins__": b, "__doc__": None}


def _safe_update_wrapper(wrapper, wrapped, assigned=None, updated=None):
  """functools.update_wrapper restricted to its default attribute lists."""
  if assigned is not None and tuple(assigned) != functools.WRAPPER_ASSIGNMENTS:
    raise ValueError("update_wrapper(assigned=...) is not allowed in the sandbox")
  if updated is not None and tuple(updated) != functools.WRAPPER_UPDATES:
    raise ValueError("update_wrapper(updated=...) is not allowed in the sandbox")
  return functools.update_wrapper(wrapper, wrapped)


def _safe_wraps(wrapped, assigned=None, updated=None):
  """functools.wraps restricted to its default attribute lists."""
  return lambda wrapper: _safe_update_wrapper(wrapper, wrapped, assigned, updated)


def _safe_getattr(obj, name, *default):
  if isinstance(name, str) and (
    policy.forbidden_attribute(name) or (type(obj) is ModuleView and name.startswith("_"))
  ):
    raise AttributeError(f"access to attribute '{name}' is not allowed in the sandbox")
  return getattr(obj, name, *default)


def _safe_setattr(obj, name, value):
  if isinstance(name, str) and policy.forbidden_attribute(name):
    raise AttributeError(f"setting attribute '{name}' is not allowed in the sandbox")
  if isinstance(obj, type) and obj.__module__ != ENV_MODULE:
    raise AttributeError(f"modifying class '{obj.__name__}' is not allowed in the sandbox")
  setattr(obj, name, value)


def _safe_delattr(obj, name):
  _safe_setattr(obj, name, None)
  delattr(obj, name)


def _print(*args, **kwargs):
  """print() with its side effects (str() of each argument) and no output."""
  for a in args:
    str(a)


class EnvFailure(Exception):
  """A call that failed in a way the host reports: kind is exception/contract/violation."""

  def __init__(self, kind: str, reason: str):
    super().__init__(reason)
    self.kind, self.reason = kind, reason


LINE_OFFSET = 1_000_000  # env code is compiled with shifted line numbers (see Worker.load)


def _env_line(tb) -> int:
  """Line of the innermost traceback entry in the environment's own code (0 if none).

  Only `tb_lineno`/`tb_next` are read: reading `tb_frame` would be an audited (denied)
  operation, and a switch to allow it would be one more thing for an escape to flip."""
  line = 0
  while tb is not None:
    if tb.tb_lineno >= LINE_OFFSET:
      line = tb.tb_lineno - LINE_OFFSET
    tb = tb.tb_next
  return line


def _describe(where: str, e: BaseException) -> str:
  try:
    msg = str(e)
  except Exception:
    msg = "<unprintable>"
  line = _env_line(e.__traceback__)
  at = f" (line {line})" if line else ""
  return f"{where} raised {type(e).__name__}: {msg[:300]}{at}"


JSON_DEPTH = 32  # info nesting kept as structure (tool specs nest JSON schemas); deeper: repr


def _jsonable(x, budget: list, depth=0):
  """`x` as JSON-safe data; `budget[0]` counts the values left (EnvFailure when spent, so a
  shared-reference structure cannot make the walk explode)."""
  budget[0] -= 1
  if budget[0] < 0:
    raise EnvFailure("contract", "info holds too many values")
  if x is None or isinstance(x, bool | str):
    return x
  if isinstance(x, int):
    return x if abs(x) < 2**63 else str(x)
  if isinstance(x, float):
    return x if math.isfinite(x) else str(x)
  if depth < JSON_DEPTH and isinstance(x, list | tuple):
    return [_jsonable(v, budget, depth + 1) for v in x[:1000]]
  if depth < JSON_DEPTH and isinstance(x, dict):
    return {str(k): _jsonable(v, budget, depth + 1) for k, v in list(x.items())[:1000]}
  try:
    return repr(x)[:1000]
  except Exception:
    return "<unrepresentable>"


class Worker:
  """Holds the loaded environment instances and executes requests."""

  def __init__(self, cfg: dict, namespaces: Namespaces, violations: list, tamper):
    self.cfg = cfg
    self.ns = namespaces
    self.violations = violations
    self.tamper = tamper
    self.envs = {}
    self.code_cache = {}

  def _text(self, what: str, obs) -> str:
    if not isinstance(obs, str):
      raise EnvFailure("contract", f"{what} observation must be str, got {type(obs).__name__}")
    if len(obs) > self.cfg["max_text_chars"]:
      cap = self.cfg["max_text_chars"]
      raise EnvFailure("contract", f"{what} observation has {len(obs)} characters (cap {cap})")
    return obs

  def _info(self, what: str, info) -> dict:
    if not isinstance(info, dict):
      raise EnvFailure("contract", f"{what} info must be a dict, got {type(info).__name__}")
    out = _jsonable(info, [self.cfg["max_info_bytes"]])  # each value takes >= 1 byte
    if len(json.dumps(out)) > self.cfg["max_info_bytes"]:
      raise EnvFailure("contract", f"{what} info exceeds {self.cfg['max_info_bytes']} bytes")
    return out

  def _turns(self, out) -> list:
    """A ToolEnv's solution(): 1..MAX_SOLUTION_TURNS agent turns, each a capped str."""
    most = tool_env.MAX_SOLUTION_TURNS
    if type(out) not in (list, tuple):  # exact types: no env-defined dunders run here
      raise EnvFailure(
        "contract",
        f"solution() of a tool environment must return a list of agent turns (str), "
        f"got {type(out).__name__}",
      )
    if not 1 <= len(out) <= most:
      raise EnvFailure("contract", f"solution() returned {len(out)} turns (need 1..{most})")
    for i, turn in enumerate(out):
      if type(turn) is not str:
        raise EnvFailure("contract", f"solution() turn {i} must be str, got {type(turn).__name__}")
      if len(turn) > self.cfg["max_text_chars"]:
        cap = self.cfg["max_text_chars"]
        raise EnvFailure("contract", f"solution() turn {i} has {len(turn)} characters (cap {cap})")
    return list(out)

  def _shape(self, method: str, out, tool: bool = False):
    if method == "reset":
      if not (isinstance(out, tuple | list) and len(out) == 2):
        got = (
          f"{type(out).__name__} of length {len(out)}"
          if isinstance(out, tuple | list)
          else type(out).__name__
        )
        raise EnvFailure("contract", f"reset() must return (observation, info), got {got}")
      obs = self._text("reset()", out[0])
      if not obs.strip():
        raise EnvFailure("contract", "reset() observation is empty")
      return [obs, self._info("reset()", out[1])]
    if method == "step":
      if not (isinstance(out, tuple | list) and len(out) == 5):
        got = (
          f"{type(out).__name__} of length {len(out)}"
          if isinstance(out, tuple | list)
          else type(out).__name__
        )
        raise EnvFailure("contract", f"step() must return a 5-tuple, got {got}")
      obs, reward, term, trunc, info = out
      obs = self._text("step()", obs)
      if not isinstance(reward, int | float) or not math.isfinite(reward):
        raise EnvFailure("contract", f"step() reward must be a real number, got {reward!r:.80}")
      if not -1.0 <= reward <= 1.0:
        raise EnvFailure("contract", f"step() reward {reward!r:.40} is outside [-1, 1]")
      for flag, v in (("terminated", term), ("truncated", trunc)):
        if not isinstance(v, bool):
          raise EnvFailure("contract", f"step() {flag} must be a bool, got {type(v).__name__}")
      return [obs, float(reward), term, trunc, self._info("step()", info)]
    if tool:
      return self._turns(out)
    if isinstance(out, bool) or not isinstance(out, str | int):
      raise EnvFailure("contract", f"solution() must return a str, got {type(out).__name__}")
    return self._text("solution()", str(out))

  def _guarded(self, where: str, fn):
    """Runs untrusted `fn`, mapping its exceptions to EnvFailure (see `answer` for denials)."""
    try:
      return fn()
    except MemoryError:
      raise EnvFailure("violation", "memory limit exceeded (MemoryError)") from None
    except BaseException as e:  # noqa: BLE001 - SystemExit & co. are the env's failures too
      raise EnvFailure("exception", _describe(where, e)) from None

  def answer(self, fn) -> dict:
    """Runs a request; a recorded denial or tampering overrides whatever it returned."""
    try:
      reply = {"ok": True, "value": fn()}
    except EnvFailure as f:
      reply = {"ok": False, "kind": f.kind, "reason": f.reason}
    except MemoryError:
      reply = {"ok": False, "kind": "violation", "reason": "memory limit exceeded (MemoryError)"}
    if self.violations:
      return {"ok": False, "kind": "violation", "reason": self.violations[0]}
    if self.tamper is not None and (name := self.tamper.changed()):
      return {"ok": False, "kind": "violation", "reason": f"modified shared module state ({name})"}
    return reply

  def load(self, req: dict):
    source = req["source"]
    code = self.code_cache.get(source)
    if code is None:
      try:
        tree = ast.parse(source, "<env>")
        ast.increment_lineno(tree, LINE_OFFSET)
        code = compile(tree, "<env>", "exec", dont_inherit=True)
      except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise EnvFailure("exception", f"compile failed: {type(e).__name__}: {e}") from None
      self.code_cache = {source: code}  # one entry: instances of one source are loaded together
    ns = self.ns.new()
    self._guarded("loading the module", lambda: exec(code, ns))
    name = req.get("class_name")
    if name is None:
      found = [
        k
        for k, v in ns.items()
        if isinstance(v, type) and k.endswith("Env") and v.__module__ == ENV_MODULE
      ]
      name = found[0] if len(found) == 1 else None
    cls = ns.get(name) if name else None
    if not isinstance(cls, type):
      raise EnvFailure("contract", "the module does not define exactly one '*Env' class")
    kwargs = req.get("kwargs") or {}
    self.envs[req["id"]] = self._guarded(f"{name}()", lambda: cls(**kwargs))
    return name

  def call(self, item: dict):
    env = self.envs.get(item["id"])
    if env is None:
      raise EnvFailure("contract", f"no environment instance {item['id']} in this worker")
    method, arg = item["method"], item.get("arg")
    if method == "reset":
      out = self._guarded(f"reset({arg!r})", lambda: env.reset(arg))
    elif method == "step":
      out = self._guarded(f"step({str(arg)[:60]!r})", lambda: env.step(arg))
    elif method == "solution":
      out = self._guarded("solution()", lambda: env.solution())
    else:
      raise EnvFailure("contract", f"unknown method {method!r}")
    return self._shape(method, out, isinstance(env, tool_env.ToolEnv))


def _read_exact(fd: int, n: int) -> bytes | None:
  chunks, got = [], 0
  while got < n:
    b = os.read(fd, min(n - got, 1 << 20))
    if not b:
      return None
    chunks.append(b)
    got += len(b)
  return b"".join(chunks)


def _read(fd: int) -> dict | None:
  head = _read_exact(fd, proto.HEADER.size)
  if head is None:
    return None
  body = _read_exact(fd, proto.HEADER.unpack(head)[0])
  return None if body is None else proto.decode(body)


def _write(fd: int, obj: dict) -> None:
  obj["cpu"] = round(time.process_time(), 4)
  try:
    data = proto.encode(obj)
  except (TypeError, ValueError) as e:
    data = proto.encode({"ok": False, "kind": "contract", "reason": f"unencodable reply: {e}"})
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view) :]


def _lock_down(cfg: dict) -> tuple[Namespaces, list, object, dict]:
  import importlib

  for name in _MODULES + _HELPERS:
    importlib.import_module(name)
  os.umask(0o077)
  sys.dont_write_bytecode = True
  namespaces = Namespaces(cfg["restricted_runtime"])
  layers = {"rlimits": sandbox_lockdown.set_rlimits(cfg)}
  stdlib = os.path.realpath(os.path.dirname(os.__file__))
  layers["landlock"] = sandbox_lockdown.install_landlock(cfg["landlock"], os.getcwd(), (stdlib,))
  layers["privileges"] = sandbox_lockdown.drop_privileges(cfg["drop_privileges"])
  layers["seccomp"] = sandbox_lockdown.install_seccomp(cfg["seccomp"])
  violations: list = []
  if cfg["audit_hook"]:
    sys.addaudithook(sandbox_lockdown.make_audit_hook(os.getcwd(), violations))
  layers["audit_hook"] = "on" if cfg["audit_hook"] else "off (disabled)"
  layers["restricted_runtime"] = "on" if cfg["restricted_runtime"] else "off (disabled)"
  tamper = None
  if cfg["restricted_runtime"]:
    tamper = sandbox_lockdown.TamperCheck([sys.modules[m] for m in _MODULES + ("collections.abc",)])
  return namespaces, violations, tamper, layers


def _fail(reason: str):
  raise EnvFailure("contract", reason)


def main() -> None:
  rfd, wfd = os.dup(0), os.dup(1)
  null = os.open(os.devnull, os.O_RDWR)
  os.dup2(null, 0)
  os.dup2(null, 1)
  os.close(null)
  init = _read(rfd)
  if init is None or init.get("op") != "init":
    sys.exit(3)
  cfg = init["config"]
  namespaces, violations, tamper, layers = _lock_down(cfg)
  worker = Worker(cfg, namespaces, violations, tamper)
  _write(wfd, {"ok": True, "value": layers, "pid": os.getpid()})
  while True:
    req = _read(rfd)
    if req is None:
      return
    op = req.get("op")
    if op == "load":
      replies = iter([lambda req=req: worker.load(req)])
    elif op == "batch":
      replies = (lambda item=item: worker.call(item) for item in req["items"])
    elif op == "drop":
      for i in req.get("ids", ()):
        worker.envs.pop(i, None)
      replies = iter([lambda: None])
    else:
      replies = iter([lambda op=op: _fail(f"unknown op {op!r}")])
    for fn in replies:
      reply = worker.answer(fn)
      _write(wfd, reply)
      if reply.get("kind") == "violation":
        return  # the host kills the worker after a violation; exit in any case


if __name__ == "__main__":
  main()
