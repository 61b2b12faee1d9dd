"""bench/walks.py's recording: a profile hook that notes each function of cadre_desktop entered
on a walk's line of causation, and the wrappers of the markers that begin and end a walk.

A walk begins when its start marker is entered (the walk armed for it), which sets a context
variable for the call; the tasks, callbacks and `asyncio.to_thread` calls made from inside
inherit it, so only the walk's own line of causation is recorded. It ends at its end marker's
entry or return. bench/walks.py says what is counted and why.
"""

from __future__ import annotations

import contextvars
import dis
import functools
import importlib
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "cadre_desktop") + os.sep
#: This file and the tool: their wrappers sit between a caller and a marker.
TOOL_FILES = frozenset({str(Path(__file__).resolve()), str(Path(__file__).resolve().with_name("walks.py"))})
#: Callers through which a call is not a step of the walk: the standard library's logging, tests, benchmarks.
EXCLUDED_CALLERS = (os.path.dirname(logging.__file__) + os.sep, str(ROOT / "tests") + os.sep, str(ROOT / "bench") + os.sep)
COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class Marker(NamedTuple):
    """Where a walk begins or ends: a function as "module:qualname", at its entry or its return,
    optionally only when one of its arguments has a value (an enum member's name, or the value)."""

    target: str
    at: str = "enter"  # "enter" or "return"
    when: tuple[str, str] | None = None



# -- recording -----------------------------------------------------------------------------------

@dataclass
class Recording:
    name: str
    steps: list[tuple[str, str]] = field(default_factory=list)
    #: Per step, whether it was made under an ASIDE function (an event's listeners).
    aside: list[bool] = field(default_factory=list)
    began_at: float | None = None
    ended_at: float | None = None

    @property
    def done(self) -> bool:
        return self.ended_at is not None


_ACTIVE: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("walk", default=None)
#: How many ASIDE functions the current call is under (one: the aside function's own entry).
_ASIDE_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("aside", default=0)
_first_resume: dict[CodeType, int] = {}


class Tracer:
    """The profile hook, the markers' wrappers, and the walk armed now."""

    def __init__(self, markers: dict[str, tuple[Marker, Marker]], aside: Sequence[str] = ()) -> None:
        #: walk -> (start, end); `aside`: functions whose callees are set aside (counted apart).
        self.markers = markers
        self.aside = tuple(aside)
        self.live = False  # a walk is being recorded somewhere (the hook's cheap test)
        self.armed: Recording | None = None
        self.walks: dict[str, Recording] = {}
        self.aside_codes: set[CodeType] = set()

    def hook(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or not self.live:
            return
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE):
            return
        rec = _ACTIVE.get()
        if rec is None or rec.done or code.co_name in COMPREHENSIONS:
            return
        if code.co_flags & RESUMABLE and frame.f_lasti > _resume_offset(code):
            return  # a coroutine or generator resumed, not entered
        if _through_excluded(frame.f_back):
            return
        rec.steps.append((code.co_filename, code.co_qualname))
        rec.aside.append(_ASIDE_DEPTH.get() > (1 if code in self.aside_codes else 0))

    def arm(self, name: str) -> Recording:
        rec = self.armed = self.walks[name] = Recording(name)
        return rec

    def begin(self, target: str) -> Recording | None:
        """The recording a start marker begins, if the armed walk starts there."""
        rec = self.armed
        if rec is None or self.markers[rec.name][0].target != target:
            return None
        self.armed, self.live, rec.began_at = None, True, time.monotonic()
        return rec

    def end(self, rec: Recording) -> None:
        rec.ended_at = time.monotonic()
        self.live = False

    def install(self) -> None:
        """Wrap every marker (before the host is made: bound methods are taken at its start)."""
        wrapped: set[str] = set()
        for start, end in self.markers.values():
            for marker in (start, end):
                if marker.target not in wrapped:
                    wrapped.add(marker.target)
                    owner, attr, fn = resolve(marker.target)
                    setattr(owner, attr, self._wrap(marker.target, fn))
        for target in self.aside:
            owner, attr, fn = resolve(target)
            self.aside_codes.add(fn.__code__)
            setattr(owner, attr, _aside(fn))
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)

    def uninstall(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)

    def _wrap(self, target: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        ends = [(name, end) for name, (_, end) in self.markers.items() if end.target == target]

        def ending(at: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Recording | None:
            rec = _ACTIVE.get()
            if rec is None or rec.done:
                return None
            for name, end in ends:
                if name == rec.name and end.at == at and _matches(fn, end.when, args, kwargs):
                    return rec
            return None

        def before(args: tuple[Any, ...], kwargs: dict[str, Any]) -> contextvars.Token[Recording | None] | None:
            rec = ending("enter", args, kwargs)
            if rec is not None:  # the end marker's own entry is the walk's last step
                rec.steps.append((fn.__code__.co_filename, fn.__code__.co_qualname))
                rec.aside.append(_ASIDE_DEPTH.get() > 0)
                self.end(rec)
            started = self.begin(target)
            return _ACTIVE.set(started) if started is not None else None

        def after(token: contextvars.Token[Recording | None] | None, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> None:
            rec = ending("return", args, kwargs)
            if rec is not None:
                self.end(rec)
            if token is not None:
                _ACTIVE.reset(token)

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                token = before(args, kwargs)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    after(token, args, kwargs)
            return awrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            token = before(args, kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                after(token, args, kwargs)
        return wrapper


def _aside(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, whose callees are counted as set aside (ASIDE)."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            token = _ASIDE_DEPTH.set(_ASIDE_DEPTH.get() + 1)
            try:
                return await fn(*args, **kwargs)
            finally:
                _ASIDE_DEPTH.reset(token)
        return awrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = _ASIDE_DEPTH.set(_ASIDE_DEPTH.get() + 1)
        try:
            return fn(*args, **kwargs)
        finally:
            _ASIDE_DEPTH.reset(token)
    return wrapper


def resolve(target: str) -> tuple[Any, str, Callable[..., Any]]:
    """(owner, attribute, function) of "module:qualname"; a clear exit when the name is gone."""
    module_name, _, qualname = target.partition(":")
    where = "name its new place in MARKERS at the top of bench/walks.py"
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError as exc:
        sys.exit(f"walks: the marker {target!r} is gone: {exc}; {where}")
    *path, attr = qualname.split(".")
    for part in path:
        owner = _attribute(target, owner, part, where)
    fn = _attribute(target, owner, attr, where)
    if not inspect.isfunction(fn):
        sys.exit(f"walks: the marker {target!r} is a {type(fn).__name__}, not a plain function; name another in MARKERS")
    return owner, attr, fn


def _attribute(target: str, owner: Any, name: str, where: str) -> Any:
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        sys.exit(f"walks: the marker {target!r} is gone: {getattr(owner, '__name__', owner)} has no {name!r}; {where}")


def _matches(fn: Callable[..., Any], when: tuple[str, str] | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if when is None:
        return True
    name, expected = when
    value = inspect.signature(fn).bind_partial(*args, **kwargs).arguments.get(name)
    return getattr(value, "name", value) == expected


def _resume_offset(code: CodeType) -> int:
    """Where a generator's or coroutine's frame is on its first entry (its first RESUME)."""
    offset = _first_resume.get(code)
    if offset is None:
        offset = _first_resume[code] = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
    return offset


def _through_excluded(frame: FrameType | None) -> bool:
    """Whether the nearest caller of ours below this frame is reached through logging, a test or a benchmark."""
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(PACKAGE):
            return False
        if path not in TOOL_FILES and path.startswith(EXCLUDED_CALLERS):
            return True
        frame = frame.f_back
    return False
