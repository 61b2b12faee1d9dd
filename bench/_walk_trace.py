"""bench/walks.py's recording: a profile hook that notes each function of cadre_desktop entered
on a walk's line of causation, and the wrappers of the markers that begin and end a walk.

A walk begins when its start marker is entered (the walk armed for it), which sets a context
variable for the call; the tasks, callbacks and `asyncio.to_thread` calls made from inside
inherit it, so only the walk's own line of causation is recorded. It ends at its end marker's
entry or return. bench/walks.py says what is counted and why.

For the reader's walk each recorded call is also a `Call` of a tree: its caller is the nearest
recorded frame below it (f_back, by the frame's identity: a coroutine's first entry has the
coroutine awaiting it there), and a call with none (the first frame of a task, a callback or an
`asyncio.to_thread` function) has its hop instead: the recorded call that was running when that
task or callback was made (`Tracer.watch` wraps the loop's `create_task`, `call_soon`,
`call_soon_threadsafe`, `call_later`, `call_at` and `asyncio.to_thread` to note it in the new
context). Each call knows when it was entered and when control first came back from it.
"""

from __future__ import annotations

import asyncio
import contextvars
import dis
import functools
import importlib
import inspect
import itertools
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
class Call:
    """One recorded call, a node of the walk's call tree (times are the tracer's event clock)."""

    index: int  # its place in Recording.calls (and .steps)
    file: str
    function: str  # the code's qualname
    entered: int
    parent: int | None = None  # the call it was made from (the nearest recorded frame below it)
    hop: int | None = None  # with no parent: the call running when its task or callback was made
    hop_at: int | None = None  # when that task or callback was made
    hop_exact: bool = False  # the hop's call was on the stack then (not a hop inherited through a context)
    returned: int | None = None  # when control first came back from it (a return, a raise, a coroutine's first wait)
    aside: bool = False


@dataclass
class Recording:
    name: str
    steps: list[tuple[str, str]] = field(default_factory=list)
    #: Per step, whether it was made under an ASIDE function (an event's listeners).
    aside: list[bool] = field(default_factory=list)
    #: Per step, its call in the walk's call tree.
    calls: list[Call] = field(default_factory=list)
    end_call: int | None = None  # the end marker's own call
    end_clock: int | None = None  # the event clock when the walk ended
    began_at: float | None = None
    ended_at: float | None = None

    @property
    def done(self) -> bool:
        return self.ended_at is not None


_ACTIVE: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("walk", default=None)
#: How many ASIDE functions the current call is under (one: the aside function's own entry).
_ASIDE_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("aside", default=0)
_first_resume: dict[CodeType, int] = {}


class Hop(NamedTuple):
    """Set in the context of a task or callback made on a walk: the call running when it was made."""

    rec: Recording
    call: int
    at: int
    exact: bool


_HOP: contextvars.ContextVar[Hop | None] = contextvars.ContextVar("walk_hop", default=None)
#: A frame of ours entered through logging, a test or a benchmark: not recorded, and no caller of what it calls.
_EXCLUDED = Call(-1, "", "", -1)
#: The loop's methods that schedule a callback or make a task (each takes `context=`).
SCHEDULERS = ("create_task", "call_soon", "call_soon_threadsafe", "call_later", "call_at")


#: What a marker's wrapper keeps from before the call to after it: the walk's token, and for a walk
#: ending at this call's return, (the call it is made from, the clock before it), to find its own call.
Before = tuple[contextvars.Token[Recording | None] | None, tuple[Call | None, int] | None]


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
        #: id(frame) -> (frame, its call): the frames of the walk's calls, for their callees' f_back. A
        #: function's frame is let go when it returns; a coroutine's is held to the walk's end (it
        #: returns at each wait), so no other frame takes its id meanwhile.
        self._frames: dict[int, tuple[FrameType, Call]] = {}
        self._clock = itertools.count()
        self._lock = threading.Lock()
        self._unwatch: list[Callable[[], None]] = []

    def hook(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.live:
            return
        if event == "return":
            entry = self._frames.get(id(frame))
            if entry is not None and entry[0] is frame:
                if entry[1].returned is None and entry[1] is not _EXCLUDED:
                    entry[1].returned = next(self._clock)
                if not frame.f_code.co_flags & RESUMABLE:
                    self._frames.pop(id(frame), None)
            return
        if event != "call":
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
            self._frames[id(frame)] = (frame, _EXCLUDED)
            return
        call = self._record(rec, frame.f_back, code, _ASIDE_DEPTH.get() > (1 if code in self.aside_codes else 0))
        self._frames[id(frame)] = (frame, call)

    def _record(self, rec: Recording, below: FrameType | None, code: CodeType, aside: bool) -> Call:
        """Note a call of `code` made from the frame `below` (the step and its place in the call tree)."""
        parent = self._nearest(below)
        hop = _HOP.get() if parent is None else None
        if hop is not None and hop.rec is not rec:
            hop = None  # set on an earlier walk
        with self._lock:
            call = Call(len(rec.calls), code.co_filename, code.co_qualname, next(self._clock),
                        parent=parent.index if parent is not None and parent is not _EXCLUDED else None,
                        hop=hop.call if hop else None, hop_at=hop.at if hop else None,
                        hop_exact=hop.exact if hop else False, aside=aside)
            rec.calls.append(call)
            rec.steps.append((code.co_filename, code.co_qualname))
            rec.aside.append(aside)
        return call

    def _nearest(self, frame: FrameType | None) -> Call | None:
        """The call of the nearest recorded frame at or below `frame` (_EXCLUDED for one not recorded)."""
        while frame is not None:
            entry = self._frames.get(id(frame))
            if entry is not None and entry[0] is frame:
                return entry[1]
            frame = frame.f_back
        return None

    def _hop_here(self) -> Hop | None:
        """The hop for a task or callback made now, on the walk's line: the call running, or the hop
        this context came by (a task made from the loop's own code)."""
        rec = _ACTIVE.get()
        if not self.live or rec is None or rec.done:
            return None
        call = self._nearest(sys._getframe(1))
        if call is not None and call is not _EXCLUDED:
            return Hop(rec, call.index, next(self._clock), True)
        hop = _HOP.get()
        return hop._replace(exact=False) if hop is not None and hop.rec is rec else None

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Note the hops of `loop`'s tasks and callbacks, and of `asyncio.to_thread`, while a walk is on."""
        for name in SCHEDULERS:
            original = getattr(loop, name)
            setattr(loop, name, self._scheduling(original))
            self._unwatch.append(functools.partial(delattr, loop, name))
        original_to_thread = asyncio.to_thread
        tracer = self

        async def to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            hop = tracer._hop_here()
            if hop is None:
                return await original_to_thread(func, *args, **kwargs)
            ctx = contextvars.copy_context()  # what asyncio.to_thread does, with the hop in it
            ctx.run(_HOP.set, hop)
            return await asyncio.get_running_loop().run_in_executor(None, functools.partial(ctx.run, func, *args, **kwargs))

        asyncio.to_thread = to_thread
        self._unwatch.append(functools.partial(setattr, asyncio, "to_thread", original_to_thread))

    def unwatch(self) -> None:
        while self._unwatch:
            self._unwatch.pop()()

    def _scheduling(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def scheduling(*args: Any, context: contextvars.Context | None = None, **kwargs: Any) -> Any:
            if context is None and self.live:  # a context given is the caller's (a task's own steps)
                hop = self._hop_here()
                if hop is not None:
                    context = contextvars.copy_context()
                    context.run(_HOP.set, hop)
            return original(*args, context=context, **kwargs)
        return scheduling

    def arm(self, name: str) -> Recording:
        rec = self.armed = self.walks[name] = Recording(name)
        return rec

    def begin(self, target: str) -> Recording | None:
        """The recording a start marker begins, if the armed walk starts there."""
        rec = self.armed
        if rec is None or self.markers[rec.name][0].target != target:
            return None
        self._frames.clear()
        self.armed, self.live, rec.began_at = None, True, time.monotonic()
        return rec

    def end(self, rec: Recording) -> None:
        rec.ended_at = time.monotonic()
        self.live = False
        rec.end_clock = next(self._clock)
        self._frames.clear()

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

        code = fn.__code__

        def before(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Before:
            rec = ending("enter", args, kwargs)
            if rec is not None:  # the end marker's own entry is the walk's last step
                rec.end_call = self._record(rec, sys._getframe(), code, _ASIDE_DEPTH.get() > 0).index
                self.end(rec)
            mark = None
            if ending("return", args, kwargs) is not None:
                mark = (self._nearest(sys._getframe()), next(self._clock))
            started = self.begin(target)
            return (_ACTIVE.set(started) if started is not None else None), mark

        def after(state: Before, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            token, mark = state
            rec = ending("return", args, kwargs)
            if rec is not None:
                if mark is not None:
                    below, since = mark
                    parent = below.index if below is not None and below is not _EXCLUDED else None
                    rec.end_call = next((c.index for c in rec.calls if c.entered > since and c.parent == parent
                                         and (c.file, c.function) == (code.co_filename, code.co_qualname)), None)
                self.end(rec)
            if token is not None:
                _ACTIVE.reset(token)

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                state = before(args, kwargs)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    after(state, args, kwargs)
            return awrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            state = before(args, kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                after(state, args, kwargs)
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
