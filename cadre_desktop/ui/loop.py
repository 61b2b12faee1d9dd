"""The tray's one event loop: qasync's, with two of its idle costs taken away (issue 38).

- Its default executor is the standard pool the headless host's loop has, which starts a
  thread only when work waits for one; qasync's own starts ten QThreads at its first use
  (the start's census) and keeps them for good.
- A callback's timer goes when its handle is cancelled. qasync gives every `call_later`
  (and `call_soon`, `call_at`: `asyncio.sleep`, `asyncio.timeout`) a Qt timer and never
  kills it on a cancel: the timer fires at its old due time and finds nothing to run, so each
  bounded await that ended early (every long-poll the probe holds, every `sleep_or_kick`
  woken by its kick) woke the tray once more for nothing (bench/README.md, "Idle CPU").

Qt kills a timer only on the thread that owns it: a handle cancelled on another thread
(never done by the engine) keeps its timer, which then fires and runs nothing, as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import Context
from typing import Any

import qasync
from PySide6.QtCore import QObject, QTimerEvent
from PySide6.QtWidgets import QApplication


class _Timers(QObject):
    """One Qt timer per pending callback, as qasync's, each killed when its handle is cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self._handles: dict[int, asyncio.Handle] = {}
        self._thread = threading.get_ident()
        self._stopped = False

    def add_callback(self, handle: asyncio.Handle, delay: float = 0) -> asyncio.Handle:
        timer_id = self.startTimer(int(max(0.0, delay) * 1000))
        self._handles[timer_id] = handle
        if isinstance(handle, _Cancellable):
            handle.cancelled_with(self, timer_id)
        return handle

    def forget(self, timer_id: int) -> None:
        """The handle of `timer_id` was cancelled: its timer goes, on this object's own thread."""
        if threading.get_ident() == self._thread and self._handles.pop(timer_id, None) is not None:
            self.killTimer(timer_id)

    def timerEvent(self, event: QTimerEvent) -> None:  # noqa: N802 (Qt's name)
        timer_id = event.timerId()
        self.killTimer(timer_id)
        handle = self._handles.pop(timer_id, None)
        if handle is not None and not self._stopped and not handle.cancelled():
            handle._run()

    def stop(self) -> None:
        self._stopped = True

    def set_debug(self, enabled: bool) -> None:
        """qasync asks it of its timers; these log nothing."""


class _Cancellable(asyncio.Handle):
    """A callback whose cancel also takes its timer away."""

    __slots__ = ("_timers", "_timer_id")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], loop: asyncio.AbstractEventLoop,
                 context: Context | None = None) -> None:
        super().__init__(callback, args, loop, context=context)
        self._timers: _Timers | None = None
        self._timer_id = 0

    def cancelled_with(self, timers: _Timers, timer_id: int) -> None:
        self._timers, self._timer_id = timers, timer_id

    def cancel(self) -> None:
        timers, self._timers = self._timers, None
        if timers is not None and not self.cancelled():
            timers.forget(self._timer_id)
        super().cancel()


class TrayLoop(qasync.QEventLoop):
    def __init__(self, app: QApplication) -> None:
        super().__init__(app)
        self._timer = _Timers()
        self.set_default_executor(ThreadPoolExecutor(thread_name_prefix="cadre-loop"))

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any,
                   context: Context | None = None) -> asyncio.Handle:
        if asyncio.iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with call_later")
        if not callable(callback):
            raise TypeError(f"callback must be callable: {type(callback).__name__}")
        return self._timer.add_callback(_Cancellable(callback, args, self, context), delay)


def tray_loop(app: QApplication) -> TrayLoop:
    """The tray's event loop (this module's docstring says how it differs from qasync's own)."""
    return TrayLoop(app)
