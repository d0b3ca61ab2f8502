"""SIGINT/SIGTERM for a run loop: stop at the next chunk boundary, or abandon the chunk.

    with StopSignals(log) as stop:
      while ...:
        out = stop.wait(lambda: run_chunk())   # interruptible; raises Abandoned
        ...
        if stop.requested:                     # first signal: save, then end
          ...

The first SIGINT or SIGTERM asks the loop to stop after the chunk in flight (the loop
then saves a checkpoint of it); a second one while the loop waits for a chunk abandons
that chunk (`Abandoned` is raised out of `wait`) so the loop can save the last completed
update at once. A compiled chunk runs in a helper thread while the main thread waits on
an event, because Python runs signal handlers only in the main thread and only between
bytecodes: a main thread blocked inside XLA would not see a signal until the chunk ended.
Handlers are installed only when used from the main thread, and the previous ones are
restored on exit.
"""
from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Optional

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Abandoned(Exception):
  """A second signal arrived while waiting for a chunk; the chunk's result is dropped."""

  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = signum


class StopSignals:
  """Catches SIGINT/SIGTERM for the life of a `with` block.

  Args:
    log: where the line acknowledging the first signal goes.
    what_next: called for that line's ending (e.g. "then saves update 40").
  """

  def __init__(self, log: Callable[[str], None] = print,
               what_next: Callable[[], str] = lambda: ""):
    self.signum: Optional[int] = None
    self._log = log
    self._what_next = what_next
    self._waiting = False
    self._unannounced = False
    self._previous = {}

  @property
  def requested(self) -> bool:
    """True once a signal asked the run to stop."""
    return self.signum is not None

  @property
  def name(self) -> str:
    return signal.Signals(self.signum).name if self.signum else ""

  def _handle(self, signum, frame) -> None:
    del frame
    if self.signum is None:
      self.signum = signum
      self._unannounced = True
      if self._waiting:   # else the main thread may be inside `log` itself: later
        self.announce()
    elif self._waiting:
      raise Abandoned(signum)

  def announce(self) -> None:
    """Logs the acknowledgement of the first signal, if not yet done (main thread)."""
    if self._unannounced:
      self._unannounced = False
      self._log(f"{self.name}: finishing the chunk in flight, {self._what_next()} "
                f"(send it again to abandon the chunk)")

  def wait(self, fn: Callable[[], Any]) -> Any:
    """`fn()` run in a helper thread, waited for interruptibly; its result or exception.

    Raises:
      Abandoned: a second signal arrived meanwhile (`fn` keeps running in its thread,
        its result is dropped).
    """
    done = threading.Event()
    box = {}

    def target():
      try:
        box["value"] = fn()
      except BaseException as e:  # pylint: disable=broad-except
        box["error"] = e
      finally:
        done.set()

    threading.Thread(target=target, name="credit_jax-chunk", daemon=True).start()
    self.announce()
    self._waiting = True
    try:
      done.wait()
    finally:
      self._waiting = False
    if "error" in box:
      raise box["error"]
    return box["value"]

  def __enter__(self) -> "StopSignals":
    if threading.current_thread() is threading.main_thread():
      for s in _SIGNALS:
        self._previous[s] = signal.signal(s, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    self._previous.clear()
