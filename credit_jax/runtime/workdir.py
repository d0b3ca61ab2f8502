"""One writer per workdir: a lock file that names its holder; and `prepare`, which
refuses a workdir a run could not write (a file, a path under a file, read-only).

    with WorkdirLock(workdir, log=print):     # WorkdirBusyError if another run holds it
      ...                                     # the run's whole lifetime

`workdir/run.lock` holds the holder's host, pid, start time and command as JSON, and the
holder keeps an exclusive `flock` on it for as long as it runs. The kernel drops that
lock when the holder ends in any way (SIGKILL included), so a lock file whose lock is free
was left by a run that is gone: the next run says whose it was and takes it over. On a
file system without `flock` the holder's liveness is judged from the file instead: a
holder on this host whose pid no longer exists is gone; one on another host is presumed
alive (delete the file if you know better). On release the file is emptied, not deleted
(deleting it could let two runs lock two different files).

In a `jax.distributed` run only process 0 takes the lock, for all processes
(credit_jax/runtime/run.py).
"""
from __future__ import annotations

import datetime
import errno
import json
import os
import socket
import sys
import time
from typing import Callable, Optional

LOCK_FILE = "run.lock"
# errnos of a file system that does not implement flock.
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)

try:
  import fcntl
except ImportError:   # not POSIX: only the file's contents say who holds it
  fcntl = None


class WorkdirBusyError(RuntimeError):
  """Another live run holds the workdir's lock."""


class WorkdirError(RuntimeError):
  """The workdir cannot be used: it is a file, under a file, or not writable."""


def prepare(workdir: str) -> str:
  """Creates `workdir` if needed and checks that a run can write in it; returns its
  absolute path.

  Raises:
    WorkdirError: one line saying what is wrong with the path and what to do.
  """
  path = os.path.abspath(workdir)
  if os.path.exists(path) and not os.path.isdir(path):
    raise WorkdirError(f"--workdir {path} is a file, not a directory; pass a directory "
                       f"(a new one is created)")
  try:
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f".write_probe.{os.getpid()}")
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except (NotADirectoryError, FileExistsError):
    raise WorkdirError(f"--workdir {path}: a part of the path is a file, not a "
                       f"directory; pass another path") from None
  except OSError as e:
    raise WorkdirError(f"--workdir {path} is not writable ({e.strerror or e}); pass a "
                       f"directory you can write to") from None
  return path


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:   # exists, another user's
    return True
  return True


def _describe_holder(info: dict) -> str:
  return (f"pid {info.get('pid')} on host {info.get('host')} (started "
          f"{info.get('started')}: {info.get('command')})")


class WorkdirLock:
  """The lock of `workdir` (see the module docstring).

  Args:
    workdir: the run's directory (created if missing).
    log: where the takeover of a stale lock is reported.
    use_flock: False judges liveness from the file's contents only (as on a file
      system without flock); for tests.
  """

  def __init__(self, workdir: str, log: Callable[[str], None] = print,
               use_flock: bool = True):
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(os.path.abspath(workdir), LOCK_FILE)
    self._log = log
    self._use_flock = use_flock and fcntl is not None
    self._fd: Optional[int] = None

  def _read(self, fd: int) -> Optional[dict]:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 65536):
      data += chunk
    try:
      info = json.loads(data.decode() or "null")
    except (UnicodeDecodeError, json.JSONDecodeError):
      return {"pid": "?", "host": "?", "started": "?", "command": "(unreadable lock)"}
    return info if isinstance(info, dict) else None

  def _flock(self, fd: int) -> bool:
    """True if this process now holds the kernel lock; False if another does."""
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      return True
    except BlockingIOError:
      return False
    except OSError as e:
      if e.errno not in _NO_FLOCK:
        raise
      self._use_flock = False
      return True

  def acquire(self) -> "WorkdirLock":
    """Takes the lock; raises WorkdirBusyError naming the holder if a live run has it."""
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      got = self._flock(fd) if self._use_flock else True
      previous = self._read(fd)
      me = (socket.gethostname(), os.getpid())
      for _ in range(20):   # a holder that has just locked may not have written yet
        if got or (previous and self._alive(previous, me)):
          break
        time.sleep(0.05)
        previous = self._read(fd)
      if not got or (not self._use_flock and previous and self._alive(previous, me)):
        raise WorkdirBusyError(
            f"workdir {os.path.dirname(self.path)} is in use by "
            f"{_describe_holder(previous or {})}; wait for that run to end or use "
            f"another --workdir (its lock: {self.path})")
      if previous:
        self._log(f"took over the lock of a run that is gone: {_describe_holder(previous)}")
      info = {"host": me[0], "pid": me[1],
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"),
              "command": " ".join(sys.argv)}
      os.ftruncate(fd, 0)
      os.pwrite(fd, json.dumps(info).encode(), 0)
      os.fsync(fd)
    except BaseException:
      os.close(fd)
      raise
    self._fd = fd
    return self

  @staticmethod
  def _alive(info: dict, me) -> bool:
    """Without flock: whether the holder `info` may still be running."""
    if (info.get("host"), info.get("pid")) == me:
      return False   # a lock this very process left (e.g. an earlier run in it)
    if info.get("host") != me[0]:
      return True
    return isinstance(info.get("pid"), int) and _pid_alive(info["pid"])

  def release(self) -> None:
    """Empties the file and drops the lock (idempotent)."""
    if self._fd is None:
      return
    try:
      os.ftruncate(self._fd, 0)
    finally:
      os.close(self._fd)   # closing drops the flock
      self._fd = None

  def __enter__(self) -> "WorkdirLock":
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()
