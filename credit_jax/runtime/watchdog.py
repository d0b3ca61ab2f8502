"""A watchdog for long runs: a hang becomes an error with stacks, never silence.

The run loop (credit_jax/runtime/run.py) arms it when it starts and tells it each time a
compiled chunk has finished (`chunk_done`). If nothing finishes in time it writes a
message, the Python stack of every thread (`faulthandler`) and advice to stderr, then ends
the process with `EXIT_CODE`. Time allowed:

* until the first chunk finishes (set-up, restore, compilation and the chunk):
  `first_s` seconds;
* every later chunk: `max(factor * slowest chunk so far, floor_s)` seconds.

It must end the process from its own thread: a hung XLA call holds the main thread in C
code, where neither an exception nor a signal handler reaches it, so the exit is
`os._exit` (no clean-up runs; the last checkpoint on disk is complete, because saves
are atomic, see credit_jax/runtime/checkpoint.py). The wedge seen with jaxlib 0.10 left every
thread parked with the GIL free, so this Python thread runs; against a hang that holds
the GIL, `faulthandler.dump_traceback_later` (a C thread) is armed `backstop_s` later
and dumps the stacks and exits with status 1 without the message (it is process-wide:
the watchdog replaces any other use of it while it runs).
"""
from __future__ import annotations

import dataclasses
import faulthandler
import os
import sys
import threading
import time
from typing import Callable, Optional

EXIT_CODE = 4
_BACKSTOP_S = 60.0   # the C-level backstop fires this long after the watchdog should have


@dataclasses.dataclass(frozen=True)
class WatchdogOptions:
  """How long a run may go without finishing a chunk before it is presumed hung.

  Attributes:
    first_s: seconds allowed until the first chunk finishes (includes compilation);
      0 turns the watchdog off.
    floor_s: the least time allowed for any later chunk.
    factor: a later chunk may take `factor` times the slowest chunk so far.
  """
  first_s: float = 1800.0
  floor_s: float = 300.0
  factor: float = 10.0

  def __post_init__(self):
    if self.first_s < 0 or self.floor_s <= 0 or self.factor < 1:
      raise ValueError(f"watchdog needs first_s >= 0, floor_s > 0 and factor >= 1, got "
                       f"{self}")


def _error_stream():
  """A stream with a file descriptor (faulthandler writes to the descriptor)."""
  for stream in (sys.stderr, sys.__stderr__):
    try:
      stream.fileno()
      return stream
    except (AttributeError, OSError, ValueError):
      continue
  return None


class Watchdog:
  """Ends a hung process; use as a context manager around the run loop.

  Args:
    options: the time limits.
    describe: called when it fires; returns what to tell the user (the last checkpoint
      and how to resume). Runs in the watchdog's thread: it must not call into JAX.
    advice: called when it fires; the setting to try (`credit_jax.runtime.launch.hang_advice`).
    on_fire: what ends the process (default `os._exit(EXIT_CODE)`); tests replace it
      (and then no backstop is armed).
    backstop_s: seconds after the limit at which the C-level backstop fires.
  """

  def __init__(self, options: WatchdogOptions, describe: Callable[[], str],
               advice: Callable[[], str] = lambda: "",
               on_fire: Optional[Callable[[], None]] = None,
               backstop_s: float = _BACKSTOP_S):
    self.options = options
    self._backstop_s = float(backstop_s) if on_fire is None else None
    self._describe = describe
    self._advice = advice
    self._on_fire = on_fire or (lambda: os._exit(EXIT_CODE))  # pylint: disable=protected-access
    self._wake = threading.Event()
    self._lock = threading.Lock()
    self._slowest = 0.0
    self._chunks = 0
    self._started = self._deadline_from = 0.0
    self._limit = float(options.first_s)
    self._stopped = False
    self._thread: Optional[threading.Thread] = None

  @property
  def enabled(self) -> bool:
    return self.options.first_s > 0

  def limit(self) -> float:
    """Seconds the current wait may last."""
    with self._lock:
      return self._limit

  def start(self) -> "Watchdog":
    if not self.enabled:
      return self
    self._started = self._deadline_from = time.monotonic()
    self._arm_backstop(self._limit)
    self._thread = threading.Thread(target=self._watch, name="credit_jax-watchdog",
                                    daemon=True)
    self._thread.start()
    return self

  def chunk_done(self, seconds: float) -> None:
    """A chunk finished after `seconds` (its whole iteration); the next wait starts now."""
    with self._lock:
      self._chunks += 1
      self._slowest = max(self._slowest, float(seconds))
      self._limit = max(self.options.factor * self._slowest, self.options.floor_s)
      self._deadline_from = time.monotonic()
    self._arm_backstop(self._limit)
    self._wake.set()   # the watching thread recomputes its deadline

  def _arm_backstop(self, limit: float) -> None:
    stream = _error_stream()
    if self._backstop_s is not None and self.enabled and stream is not None:
      faulthandler.dump_traceback_later(limit + self._backstop_s, exit=True, file=stream)

  def stop(self) -> None:
    if self._backstop_s is not None and self.enabled:
      faulthandler.cancel_dump_traceback_later()
    self._stopped = True
    self._wake.set()
    if self._thread is not None:
      self._thread.join()

  def _watch(self) -> None:
    while True:
      with self._lock:
        remaining = self._deadline_from + self._limit - time.monotonic()
      if self._stopped:
        return
      if remaining <= 0:
        self._fire()
        return
      self._wake.wait(remaining)
      self._wake.clear()

  def _fire(self) -> None:
    if self._backstop_s is not None:
      faulthandler.cancel_dump_traceback_later()   # this message says more
    with self._lock:
      waited = time.monotonic() - self._deadline_from
      limit, chunks, slowest = self._limit, self._chunks, self._slowest
    what = ("the first chunk (set-up and compilation included)" if chunks == 0 else
            f"chunk {chunks + 1} (the slowest of {chunks} so far took {slowest:.1f} s)")
    stream = _error_stream()
    lines = [f"error: watchdog: {what} has not finished after {waited:.0f} s "
             f"(limit {limit:.0f} s): the run is presumed hung. Python stacks of every "
             f"thread follow."]
    if stream is not None:
      stream.write("\n" + lines[0] + "\n")
      stream.flush()
      faulthandler.dump_traceback(file=stream, all_threads=True)
      stream.write(f"error: watchdog: {self._describe()} {self._advice()}\n")
      stream.flush()
    self._on_fire()

  def __enter__(self) -> "Watchdog":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()


def heartbeat_log(dog: "Watchdog", write: Callable[[str], None] = print
                  ) -> Callable[[str], None]:
  """A `log(line)` for programs that log a line per finished piece of work (an
  experiment's cells, a sweep's chunks): it writes the line, then tells `dog` that a
  piece finished after the time since the previous line (`Watchdog.chunk_done`)."""
  last = [time.monotonic()]

  def log(line: str) -> None:
    write(line)
    now = time.monotonic()
    dog.chunk_done(now - last[0])
    last[0] = now
  return log


def define_flags(flags_module, what: str, floor_s: float) -> Callable[[], WatchdogOptions]:
  """Defines `--watchdog_first_s` and `--watchdog_floor_s` on absl's `flags_module` for an
  entry point whose unit of progress is `what` (e.g. "chunk"); returns a function that
  reads them as `WatchdogOptions` after parsing."""
  first = flags_module.DEFINE_float(
      "watchdog_first_s", 1800.0, f"Seconds until the first {what} finishes (compilation "
      f"included) before the run is presumed hung; 0 turns the watchdog off.",
      lower_bound=0.0)
  floor = flags_module.DEFINE_float(
      "watchdog_floor_s", floor_s, f"Least seconds any later {what} may take (it may also "
      f"take 10x the slowest so far) before the run is presumed hung.", lower_bound=1.0)
  return lambda: WatchdogOptions(first_s=first.value, floor_s=floor.value)
