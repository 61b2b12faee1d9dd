"""When nodes run, from the command line: `pause [--for 30m | --until 07:00]`, `resume` and `conditions`.

Clients of the control API (`POST /api/host/pause`, `POST /api/host/resume`,
`GET /api/host/conditions`). A pause holds every node until its end or a `resume`, and
outlives a restart of the host; `conditions` prints each run condition, what it sees now,
where from and what it does, and the verdict. `until_arg` reads a time as `node pause` does.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from cadre_desktop.cli import lending
from cadre_desktop.cli.terminal import EXIT_OK, PROG, client, clip, out, print_json, show, shown, table
from cadre_desktop.paths import Paths
from cadre_desktop.times import parse_time


def until_arg(text: str, now: datetime | None = None) -> str:
    """`07:00` (the next 07:00 local time), `07:00:30`, or an RFC 3339 time -> RFC 3339 with its zone."""
    text = text.strip()
    now = (now or datetime.now().astimezone()).astimezone()
    for pattern in ("%H:%M", "%H:%M:%S"):
        try:
            clock = datetime.strptime(text, pattern).time()
        except ValueError:
            continue
        when = now.replace(hour=clock.hour, minute=clock.minute, second=clock.second, microsecond=0)
        if when <= now:
            # The next such time: tomorrow's, said in tomorrow's zone offset (a DST change between).
            when = (when.replace(tzinfo=None) + timedelta(days=1)).astimezone()
        return when.isoformat()
    if parse_time(text, zone="local") is None:  # a date and time without a zone is local time
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (like 07:00, or 2026-01-01T07:00:00+01:00)")
    when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return (when if when.tzinfo is not None else when.astimezone()).isoformat()


def add_when(parser: argparse.ArgumentParser) -> None:
    """`--for DURATION | --until TIME`, as `node pause` and `pause` take them."""
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--for", dest="for_s", type=lending.duration_arg, metavar="DURATION",
                      help="this long, then start again (90s, 30m, 2h, 1d)")
    when.add_argument("--until", type=until_arg, metavar="TIME",
                      help="until this time (07:00 means the next 07:00 here, or RFC 3339)")


def pause_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.for_s is not None:
        return {"for_ms": args.for_s * 1000}
    if args.until is not None:
        return {"until": args.until}
    return {}


def add_parsers(commands: Any, as_json: argparse.ArgumentParser) -> None:
    pause = commands.add_parser("pause", parents=[as_json],
                                help="stop every node and keep them stopped (for a while, until a time, or "
                                     "until `resume`); kept across a restart")
    add_when(pause)
    pause.set_defaults(func=cmd_pause)
    commands.add_parser("resume", parents=[as_json], help="end a pause: every node runs again"
                        ).set_defaults(func=cmd_resume)
    commands.add_parser("conditions", parents=[as_json],
                        help="each run condition (battery, in use, metered, schedule): what it sees and does"
                        ).set_defaults(func=cmd_conditions)


def pause_words(pause: dict[str, Any], now: datetime | None = None) -> str:
    """"paused for 24 more minutes (until 07:00)", "paused until you resume", or "not paused"."""
    if not pause.get("paused"):
        return "not paused"
    until = pause.get("until")
    if not until:
        return f"paused until you resume ({PROG} resume)"
    end_utc = parse_time(until)
    if end_utc is None:
        return "paused (until an unreadable time)"
    end = end_utc.astimezone()
    left = (end - (now or datetime.now().astimezone())).total_seconds()
    minutes = max(1, round(left / 60))
    length = f"{minutes} more minute{'s' if minutes != 1 else ''}" if minutes < 120 else f"{left / 3600:.1f} more hours"
    return f"paused for {length} (until {end.strftime('%a %H:%M')})"


def cmd_pause(args: argparse.Namespace, paths: Paths) -> int:
    pause = client(paths).request("POST", "/api/host/pause", pause_body(args), timeout=60)
    return show(args, pause, lambda doc: f"Every node is {pause_words(doc)}.")


def cmd_resume(args: argparse.Namespace, paths: Paths) -> int:
    state = client(paths).request("POST", "/api/host/resume", {}, timeout=60)
    return show(args, state, lambda _: "Resumed: every node the pause held runs again "
                f"(the run conditions still apply: {PROG} conditions).")


def cmd_conditions(args: argparse.Namespace, paths: Paths) -> int:
    report = client(paths).request("GET", "/api/host/conditions")
    if args.json:
        print_json(report)
        return EXIT_OK
    out(conditions_text(report))
    return EXIT_OK


def conditions_text(report: dict[str, Any]) -> str:
    rows = [(clip(str(c.get("name")), 12), clip(str(c.get("sees")), 44), clip(str(c.get("source")), 40),
             clip(str(c.get("does")), 44)) for c in report.get("conditions", [])]
    lines = [table(("CONDITION", "SEES", "FROM", "DOES"), rows), ""]
    verdict = report.get("verdict") or {}
    if verdict.get("run", True):
        lines.append("Verdict: the nodes may run.")
    else:
        lines.append(f"Verdict: the nodes are held ({shown(verdict.get('reason'))}).")
    if report.get("pending_s") is not None:
        lines.append(f"A change is waiting out the debounce: taken in {report['pending_s']:.0f} s.")
    if report.get("resumed"):
        lines.append(f"Resumed by a person: {shown(report['resumed'])}.")
    lines.append(f"Pause all: {pause_words(report.get('pause') or {})}.")
    return "\n".join(lines)
