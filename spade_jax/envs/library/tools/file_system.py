"""File system: a shell-like session (cd, ls, mkdir, mv, rm, wc) over a mock directory tree.

Tool-use skill: State Modification (medium), multi-instruction (BFCL multi-turn style) with a
computed answer. Three instructions are revealed one at a time: create a folder, move a file
into it, delete the `.tmp` files of a directory and report the moved file's line count. `pwd`
and `cat` are not needed; tools fail with shell-like errors on missing paths.
"""

import json
import random

from tool_env import ToolEnv

TOP_DIRS = ["documents", "projects", "downloads", "archive", "notes", "reports", "scratch"]
SUB_DIRS = ["2023", "2024", "drafts", "old", "shared", "misc"]
STEMS = [
  "budget",
  "todo",
  "meeting_notes",
  "roadmap",
  "invoice",
  "readme",
  "summary",
  "changelog",
  "contacts",
  "recipes",
  "journal",
  "report",
  "plan",
  "results",
  "ideas",
  "schedule",
]
EXTENSIONS = [".txt", ".md", ".csv", ".log"]
NEW_NAMES = ["backup", "keep", "review", "sorted", "final", "inbox", "current", "q3"]
WORDS = ["alpha", "beta", "data", "note", "call", "ship", "fix", "plan", "item", "cost", "due"]


def _call(tool, /, **arguments):
  return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


def _tool(description, properties=None, required=()):
  params = {"type": "object", "properties": properties or {}, "required": list(required)}
  return {"description": description, "parameters": params}


def _parent(path):
  head = path.rsplit("/", 1)[0]
  return head or "/"


def _base(path):
  return path.rsplit("/", 1)[1]


def _join(folder, name):
  return folder.rstrip("/") + "/" + name


class FileSystemEnv(ToolEnv):
  def reset(self, seed=None):
    rng = random.Random(seed)
    self.cwd = "/"
    self.fs = {"/": None}  # path -> None for a directory, the text for a file
    tops = rng.sample(TOP_DIRS, rng.randint(4, 6))
    folders = []
    for top in tops:
      self.fs["/" + top] = None
      folders.append("/" + top)
      for sub in rng.sample(SUB_DIRS, rng.randint(0, 2)):
        self.fs[f"/{top}/{sub}"] = None
        folders.append(f"/{top}/{sub}")
    names = [s + e for s in STEMS for e in EXTENSIONS]
    for name in rng.sample(names, rng.randint(10, 20)):
      self._add_file(rng, _join(rng.choice(folders), name))
    dir_a, dir_b, dir_c = rng.sample(tops, 3)
    self.moved = rng.choice([n for n in names if not self._exists_anywhere(n)])
    self._add_file(rng, _join("/" + dir_b, self.moved))
    self.tmp_dir = "/" + dir_c
    for i in rng.sample(range(1, 10), rng.randint(1, 3)):
      self._add_file(rng, _join(self.tmp_dir, f"cache{i}.tmp"))
    self.new_dir = _join("/" + dir_a, rng.choice(NEW_NAMES))
    self.source = _join("/" + dir_b, self.moved)
    self.destination = _join(self.new_dir, self.moved)
    self.expected_answer = str(len(self.fs[self.source].split("\n")))
    self.instructions = [
      f"Inside the /{dir_a} folder, create a new folder named {_base(self.new_dir)}.",
      f"Move the file {self.moved} from /{dir_b} into the folder you just created.",
      f"Delete every .tmp file in /{dir_c}, then tell me how many lines {self.moved} has.",
    ]
    path = {"type": "string", "description": "an absolute path or one relative to the cwd"}
    self.tools = {
      "pwd": _tool("Print the current working directory.", {}),
      "ls": _tool("List a directory (the current one by default).", {"path": path}),
      "cd": _tool("Change the current working directory.", {"path": path}, ["path"]),
      "mkdir": _tool("Create a directory (its parent must exist).", {"path": path}, ["path"]),
      "mv": _tool(
        "Move or rename a file or directory; moving onto an existing directory moves into it.",
        {"source": path, "destination": path},
        ["source", "destination"],
      ),
      "rm": _tool("Remove a file or an empty directory.", {"path": path}, ["path"]),
      "cat": _tool("Print a file's contents.", {"path": path}, ["path"]),
      "wc": _tool("Count a file's lines, words and characters.", {"path": path}, ["path"]),
    }
    return self.instructions[0], {}

  def _add_file(self, rng, path):
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) for _ in range(rng.randint(3, 30))]
    self.fs[path] = "\n".join(lines)

  def _exists_anywhere(self, name):
    return any(p.endswith("/" + name) for p in self.fs)

  def instruction_done(self, i):
    if i == 0:
      return self.fs.get(self.new_dir, "") is None
    if i == 1:
      return isinstance(self.fs.get(self.destination), str) and self.source not in self.fs
    return not any(_parent(p) == self.tmp_dir and p.endswith(".tmp") for p in self.fs)

  def _resolve(self, path):
    text = str(path).strip()
    if not text:
      return self.cwd
    full = text if text.startswith("/") else _join(self.cwd, text)
    parts = []
    for part in full.split("/"):
      if part == "..":
        if parts:
          parts.pop()
      elif part and part != ".":
        parts.append(part)
    return "/" + "/".join(parts)

  def tool_pwd(self):
    return self.cwd

  def tool_ls(self, path=""):
    target = self._resolve(path)
    if target not in self.fs:
      return f"ls: cannot access '{path}': No such file or directory"
    if self.fs[target] is not None:
      return _base(target)
    kids = sorted(
      _base(p) + ("/" if self.fs[p] is None else "")
      for p in self.fs
      if p != "/" and _parent(p) == target
    )
    return "  ".join(kids) if kids else "(empty directory)"

  def tool_cd(self, path):
    target = self._resolve(path)
    if target not in self.fs:
      return f"cd: {path}: No such file or directory"
    if self.fs[target] is not None:
      return f"cd: {path}: Not a directory"
    self.cwd = target
    return f"Current directory: {target}"

  def tool_mkdir(self, path):
    target = self._resolve(path)
    if target in self.fs:
      return f"mkdir: cannot create directory '{path}': File exists"
    if self.fs.get(_parent(target), "") is not None:
      return f"mkdir: cannot create directory '{path}': No such parent directory"
    self.fs[target] = None
    return f"Created directory {target}"

  def tool_mv(self, source, destination):
    src, dst = self._resolve(source), self._resolve(destination)
    if src not in self.fs or src == "/":
      return f"mv: cannot stat '{source}': No such file or directory"
    if dst in self.fs and self.fs[dst] is None:
      dst = _join(dst, _base(src))
    if dst in self.fs:
      return f"mv: cannot move '{source}': '{dst}' already exists"
    if self.fs.get(_parent(dst), "") is not None:
      return f"mv: cannot move '{source}' to '{destination}': No such directory"
    if dst == src or dst.startswith(src + "/"):
      return f"mv: cannot move '{source}' into itself"
    moving = [p for p in self.fs if p == src or p.startswith(src + "/")]
    for p in sorted(moving):
      self.fs[dst + p[len(src) :]] = self.fs.pop(p)
    if self.cwd == src or self.cwd.startswith(src + "/"):
      self.cwd = dst + self.cwd[len(src) :]
    return f"Moved {src} -> {dst}"

  def tool_rm(self, path):
    target = self._resolve(path)
    if target not in self.fs or target == "/":
      return f"rm: cannot remove '{path}': No such file or directory"
    if self.fs[target] is None and any(_parent(p) == target for p in self.fs if p != "/"):
      return f"rm: cannot remove '{path}': Directory not empty"
    if target == self.cwd:
      return f"rm: cannot remove '{path}': it is the current directory"
    del self.fs[target]
    return f"Removed {target}"

  def _file(self, path, command):
    target = self._resolve(path)
    if target not in self.fs:
      return None, f"{command}: {path}: No such file or directory"
    if self.fs[target] is None:
      return None, f"{command}: {path}: Is a directory"
    return self.fs[target], None

  def tool_cat(self, path):
    text, error = self._file(path, "cat")
    return error or text

  def tool_wc(self, path):
    text, error = self._file(path, "wc")
    if error:
      return error
    lines = len(text.split("\n"))
    return f"lines: {lines}  words: {len(text.split())}  characters: {len(text)}"

  def solution(self):
    tmp = sorted(p for p in self.fs if _parent(p) == self.tmp_dir and p.endswith(".tmp"))
    return [
      _call("cd", path=_parent(self.new_dir)) + _call("mkdir", path=_base(self.new_dir)),
      _call("mv", source=self.source, destination=self.new_dir),
      _call("ls", path=self.tmp_dir)
      + "".join(_call("rm", path=p) for p in tmp)
      + _call("wc", path=self.destination),
      f"<answer>{self.expected_answer}</answer>",
    ]
