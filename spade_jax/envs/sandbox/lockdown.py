"""The in-process layers a sandboxed worker applies to itself before any untrusted code loads.

Run inside the worker only (standard library only; imported by file path). In order:

1. **Resource limits** (`setrlimit`): RLIMIT_AS caps memory (a memory bomb gets MemoryError),
   RLIMIT_CPU caps the worker's lifetime CPU (SIGXCPU kills a spinning worker even if the
   host's wall clock were to fail), RLIMIT_FSIZE caps any file it writes, RLIMIT_NOFILE caps
   open descriptors, RLIMIT_CORE=0 (no core dumps), RLIMIT_NPROC=1 (no new processes or
   threads; the kernel ignores it for root, hence step 3).
2. **Landlock** (Linux >= 5.13, syscalls through ctypes; no dependency): the kernel allows file
   access only inside the scratch directory (read-write) and the standard library (read-only),
   refuses TCP bind/connect (ABI >= 4) and signals/abstract sockets beyond the worker
   (ABI >= 6). Unavailable kernels report it and the other layers still hold.
3. **Privilege drop**: a worker started as root switches to uid/gid 65534 (nobody) with no
   supplementary groups, so DAC forbids writing anything the trainer owns, signalling its
   processes, and RLIMIT_NPROC becomes effective.
4. **seccomp-BPF** (x86-64 Linux, installed with prctl through ctypes; no dependency): the
   kernel refuses fork/vfork/clone/clone3 (processes and threads), execve/execveat, socket and
   friends, kill/tkill/tgkill/pidfd signalling, ptrace and cross-process memory access,
   setrlimit/prlimit (no raising limits), setsid/setpgid (cannot leave the process group the
   host kills), namespaces, mounts, io_uring, bpf, keyrings, module loading and
   uid/gid changes. Non-native syscall ABIs (i386 via int 0x80) kill the process; x32 gets
   EPERM. Elsewhere (other architectures, no seccomp) this layer reports itself unavailable.
5. **PEP 578 audit hook**: every audited operation not on an allow-list is denied with
   PermissionError *and recorded*; the worker reports the first record as a violation after
   the call even if the environment caught the exception. This stops file opens outside the
   scratch directory (reads are limited to the standard library, for lazy imports), imports,
   os.system/exec/spawn/fork/kill, subprocess, sockets, ctypes, gc introspection,
   sys.settrace/addaudithook, and reaching frames or code through `gi_frame`/`__code__`
   (`object.__getattr__`).
6. **Tamper check**: the public attributes of every allowed module and of the mutable classes
   they export are fingerprinted; any change (e.g. `random.Random.randint = ...`) is a
   violation.

Layers 1-4 are kernel-enforced and hold even against code that has escaped every Python-level
restriction; 5-6 and the restricted runtime (sandbox/worker.py) are defence in depth that also
turns most attempts into precise, early rejection reasons.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import sys
from operator import is_

NOBODY = 65534

# x86-64 syscall numbers denied by the seccomp filter (EPERM).
_DENIED_SYSCALLS_X86_64 = {
  "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62, "clone3": 435,
  "execveat": 322, "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50,
  "socketpair": 53, "accept4": 288, "ptrace": 101, "process_vm_readv": 310,
  "process_vm_writev": 311, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
  "rt_tgsigqueueinfo": 297, "pidfd_send_signal": 424, "pidfd_open": 434, "pidfd_getfd": 438,
  "setrlimit": 160, "prlimit64": 302, "setsid": 112, "setpgid": 109, "unshare": 272,
  "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "bpf": 321,
  "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
  "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
  "personality": 135, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
  "finit_module": 313, "delete_module": 176, "reboot": 169, "mknod": 133, "mknodat": 259,
  "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117,
  "setresgid": 119, "setgroups": 116, "setfsuid": 122, "setfsgid": 123,
  "open_by_handle_at": 304, "name_to_handle_at": 303, "acct": 163, "swapon": 167,
  "swapoff": 168, "syslog": 103, "quotactl": 179, "fanotify_init": 300,
}  # fmt: skip
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000


def set_rlimits(cfg: dict) -> dict:
  """Applies the resource limits (soft == hard except CPU); returns the soft values."""
  limits = {
    "RLIMIT_CORE": 0,
    "RLIMIT_AS": int(cfg["memory_bytes"]),
    "RLIMIT_CPU": int(cfg["cpu_seconds"]),
    "RLIMIT_FSIZE": int(cfg["file_bytes"]),
    "RLIMIT_NOFILE": int(cfg["max_open_files"]),
    "RLIMIT_NPROC": 1,
  }
  done = {}
  for name, value in limits.items():
    res = getattr(resource, name, None)
    if res is None:
      continue
    # CPU: the soft limit sends SIGXCPU (reported as a timeout); hard == soft would be SIGKILL.
    hard = value + 2 if name == "RLIMIT_CPU" else value
    try:
      resource.setrlimit(res, (value, hard))
      done[name] = value
    except (ValueError, OSError) as e:
      done[name] = f"not set: {e}"
  return done


def drop_privileges(enabled: bool) -> str:
  if os.geteuid() != 0:
    return f"unchanged (uid {os.geteuid()} is not root)"
  if not enabled:
    return "kept root (drop_privileges disabled)"
  try:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
  except OSError as e:
    return f"kept root (drop failed: {e})"
  return f"dropped to uid/gid {NOBODY}"


def _bpf_program() -> list[tuple[int, int, int, int]]:
  ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
  ret_allow, ret_kill, ret_eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
  nrs = sorted(set(_DENIED_SYSCALLS_X86_64.values()))
  n = len(nrs)
  prog = [
    (ld_abs, 0, 0, 4),  # seccomp_data.arch
    (jeq, 1, 0, _AUDIT_ARCH_X86_64),
    (ret, 0, 0, ret_kill),
    (ld_abs, 0, 0, 0),  # seccomp_data.nr
    (jge, n + 1, 0, _X32_BIT),
  ]
  for j, nr in enumerate(nrs):
    prog.append((jeq, n - j, 0, nr))
  prog += [(ret, 0, 0, ret_allow), (ret, 0, 0, ret_eperm)]
  return prog


def install_seccomp(enabled: bool) -> str:
  """Installs the deny-list filter; returns "on" or why it is not."""
  if not enabled:
    return "off (disabled)"
  if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
    return f"unavailable (needs x86-64 Linux, this is {sys.platform}/{platform.machine()})"

  class SockFilter(ctypes.Structure):
    _fields_ = [
      ("code", ctypes.c_ushort),
      ("jt", ctypes.c_ubyte),
      ("jf", ctypes.c_ubyte),
      ("k", ctypes.c_uint32),
    ]

  class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

  prog = _bpf_program()
  filters = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
  fprog = SockFprog(len(prog), filters)
  libc = ctypes.CDLL(None, use_errno=True)
  prctl = libc.prctl
  prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
  if prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
    return f"unavailable (PR_SET_NO_NEW_PRIVS failed: errno {ctypes.get_errno()})"
  if prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return f"unavailable (PR_SET_SECCOMP failed: errno {ctypes.get_errno()})"
  return "on"


# Landlock (Linux >= 5.13): syscalls 444-446 on x86-64 and aarch64 alike.
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_FS_READ = (1 << 2) | (1 << 3)  # READ_FILE | READ_DIR


def _landlock_masks(abi: int) -> tuple[int, int, int]:
  """(handled fs rights, handled net rights, scopes) known to Landlock ABI `abi`."""
  fs = (1 << 13) - 1  # ABI 1: execute, write/read file, read dir, remove/make anything
  fs |= (1 << 13) if abi >= 2 else 0  # REFER
  fs |= (1 << 14) if abi >= 3 else 0  # TRUNCATE
  fs |= (1 << 15) if abi >= 5 else 0  # IOCTL_DEV
  net = 0b11 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP
  scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets, signals
  return fs, net, scoped


def install_landlock(enabled: bool, scratch: str, read_only: tuple[str, ...]) -> str:
  """Kernel-enforced filesystem policy: read-write inside `scratch`, read-only in `read_only`,
  nothing elsewhere; no TCP bind/connect; no signals or abstract sockets outside the worker.
  Holds even if every Python-level layer were bypassed. Needs PR_SET_NO_NEW_PRIVS (set here)."""
  if not enabled:
    return "off (disabled)"
  if not sys.platform.startswith("linux"):
    return f"unavailable (needs Linux, this is {sys.platform})"
  libc = ctypes.CDLL(None, use_errno=True)
  syscall = libc.syscall
  syscall.restype = ctypes.c_long
  abi = syscall(_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # ..._VERSION
  if abi < 1:
    return f"unavailable (landlock_create_ruleset: errno {ctypes.get_errno()})"
  fs, net, scoped = _landlock_masks(abi)
  attr = (ctypes.c_uint64 * 3)(fs, net, scoped)
  size = 8 if abi < 4 else 16 if abi < 6 else 24
  ruleset = syscall(_LL_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
  if ruleset < 0:
    return f"unavailable (landlock ruleset: errno {ctypes.get_errno()})"

  class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

  try:
    for path, access in [(scratch, fs)] + [(p, _LL_FS_READ) for p in read_only]:
      try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
      except OSError:
        if path == scratch:
          return f"unavailable (cannot open the scratch dir {scratch})"
        continue  # an unreadable read-only path simply stays unreadable
      try:
        rule = PathBeneath(access, fd)
        if syscall(_LL_ADD_RULE, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
          return f"unavailable (landlock_add_rule {path}: errno {ctypes.get_errno()})"
      finally:
        os.close(fd)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
      return f"unavailable (PR_SET_NO_NEW_PRIVS: errno {ctypes.get_errno()})"
    if syscall(_LL_RESTRICT, ruleset, ctypes.c_uint32(0)) != 0:
      return f"unavailable (landlock_restrict_self: errno {ctypes.get_errno()})"
  finally:
    os.close(ruleset)
  return f"on (ABI {abi})"


def _is_write(mode, flags) -> bool:
  if isinstance(mode, str):
    return any(c in mode for c in "wax+")
  if isinstance(flags, int):
    bits = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    return bool(flags & bits)
  return True


def _under(path: str, roots: tuple[str, ...]) -> bool:
  return any(path == r or path.startswith(r + os.sep) for r in roots)


def make_audit_hook(scratch: str, violations: list):
  """The audit hook closure; denials are appended to `violations` (which the worker reads).

  It has no off switch. Like every in-process layer it is defence in depth (PEP 578 hooks are
  not a security boundary against code that has escaped to arbitrary objects); the kernel
  layers (landlock, seccomp, privilege drop, rlimits) hold regardless.
  """
  scratch = os.path.realpath(scratch)
  stdlib = (os.path.realpath(os.path.dirname(os.__file__)),)  # includes lib-dynload
  realpath, fspath = os.path.realpath, os.fspath
  settable = frozenset({"__module__", "__name__", "__qualname__", "__doc__"})
  free = frozenset({"exec", "compile", "sys._getframe", "builtins.id", "marshal.loads"})

  def deny(event: str, detail: str):
    if not violations:
      violations.append(f"denied operation {event}{detail}")
    raise PermissionError(f"sandbox: operation {event} is not permitted")

  def hook(event, args):
    if event in free:
      return
    if event == "open":
      path, mode, flags = (tuple(args) + (None, None, None))[:3]
      if isinstance(path, int) or path is None:
        deny(event, f"(fd {path})")
      try:
        p = realpath(fspath(path))
      except (TypeError, ValueError):
        deny(event, "(unusable path)")
      if isinstance(p, bytes):
        p = p.decode("utf-8", "replace")
      if _under(p, (scratch,)) or (not _is_write(mode, flags) and _under(p, stdlib)):
        return
      deny(event, f"({p!r}, write={_is_write(mode, flags)})")
    if event == "import":
      name = str(args[0]) if args else "?"
      if name.startswith("encodings."):
        return
      deny(event, f"({name!r})")
    if event == "object.__setattr__" and len(args) > 1 and args[1] in settable:
      return
    deny(event, "")

  return hook


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: setattr on such a class raises TypeError


def _fingerprint_targets(modules: list) -> list[tuple[str, object]]:
  targets = []
  for mod in modules:
    targets.append((mod.__name__, mod.__dict__))
    for name, value in list(vars(mod).items()):
      if not name.startswith("_") and isinstance(value, type):
        if not value.__flags__ & _IMMUTABLE_TYPE:
          targets.append((f"{mod.__name__}.{name}", value.__dict__))
  return targets


class TamperCheck:
  """Fingerprints module and (mutable) class dictionaries by key and value identity.

  Any assignment, deletion or addition changes the length or an identity. Holding the keys and
  values keeps their ids from being reused by new objects. Cost: ~1,000 identity compares.
  """

  def __init__(self, modules: list):
    self.targets = _fingerprint_targets(modules)
    self.saved = [(len(d), tuple(d.keys()), tuple(d.values())) for _, d in self.targets]

  def changed(self) -> str | None:
    """The first module/class whose dictionary changed since construction, else None."""
    for (name, d), (n, keys, values) in zip(self.targets, self.saved):
      if len(d) != n or not all(map(is_, d.keys(), keys)) or not all(map(is_, d.values(), values)):
        return name
    return None
