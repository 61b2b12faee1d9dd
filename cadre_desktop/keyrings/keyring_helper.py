"""The keyring helper: a short-lived child process that makes the keyring calls.

Why a process: on Linux the Secret Service backend (`secretstorage`, `jeepney` and
`cryptography`'s Rust library, which decrypts a secret) is about 10-13 MB, loaded for
good in whichever process reads a secret; the host reads every node's secret at start.
In a child they leave with it (bench/README.md, issue 26). Windows' and macOS's
backends are light, so there the calls stay in the host (`isolate_by_default`).

The shape: `HelperCalls` (in the host, on the keyring store's one worker thread) starts
the helper on the first call, writes one request a line on its stdin and reads one
answer a line from its stdout, one call at a time, as many as come (the reads at
start are one batch for one helper); the store closes it after `IDLE_S` without a
call (`SecretStore`'s worker), and the helper ends when its stdin closes, so a host
that dies takes it along. Secrets travel only on that pipe: never in argv, the
environment, a file or a log (the helper's stderr goes nowhere; its answers are
errors in words without a secret, as `BackendCalls` makes them).

A helper that dies or answers nonsense fails the call in flight as
KeyringUnavailable ("unavailable", never "missing": the gate tries again by itself)
and the next call starts a new one. A slow call stays the store's business: it times
out there (KeyringTimeout) while this thread keeps waiting for the answer.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import IO, Any

from cadre_desktop.errors import SecretsError
from cadre_desktop.keyrings.keyring_names import ERRORS, HELP_UNAVAILABLE, KeyringCalls, KeyringUnavailable, SecretKind, Where
from cadre_desktop.text import one_line

#: The helper's flag inside a bundle (no `-m` there): `cli.commands.main` runs `main()`.
FLAG = "--keyring-helper"
#: How long the helper stays after its last call before the store closes it.
IDLE_S = 10.0
#: The longest line either side reads (a request or an answer; secrets are far shorter).
MAX_LINE = 64 * 1024
#: How long a closed helper gets to exit before it is killed.
EXIT_GRACE_S = 2.0


def isolate_by_default(platform: str = sys.platform) -> bool:
    """Whether keyring calls go through the helper on this platform: everywhere but
    Windows and macOS, whose backends load little."""
    return not platform.startswith(("win32", "cygwin", "darwin"))


def helper_command(*, frozen: bool | None = None, executable: str | None = None) -> list[str]:
    """What starts the helper: the bundle itself with FLAG when frozen, else this Python."""
    frozen = getattr(sys, "frozen", False) if frozen is None else frozen
    executable = executable or sys.executable
    return [executable, FLAG] if frozen else [executable, "-m", "cadre_desktop.keyrings.keyring_helper"]


# -- in the host ---------------------------------------------------------------------------


class HelperCalls:
    """`KeyringCalls` through the helper process; for one thread at a time (the store's worker)."""

    def __init__(self, command: list[str] | None = None) -> None:
        self._command = command or helper_command()
        self._proc: subprocess.Popen[bytes] | None = None
        self._seq = 0
        #: How many helpers this started (tests and the bench read it).
        self.started = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._proc = None
        try:
            self._proc = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, close_fds=True)
        except OSError as exc:
            raise KeyringUnavailable(f"{HELP_UNAVAILABLE} (the keyring helper could not start: "
                                     f"{type(exc).__name__})") from None
        self.started += 1
        return self._proc

    def _ask(self, op: str, **args: Any) -> Any:
        proc = self._ensure()
        assert proc.stdin is not None and proc.stdout is not None
        self._seq += 1
        request = json.dumps({"id": self._seq, "op": op, **args}).encode() + b"\n"
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
            line = proc.stdout.readline(MAX_LINE + 1)
        except (OSError, ValueError):  # a closed or broken pipe: the helper is gone
            line = b""
        answer = _parse_answer(line, self._seq)
        if answer is None:
            raise KeyringUnavailable(self._gone(answered=bool(line)))
        if "error" in answer:
            raise _error_of(answer["error"])
        return answer.get("result")

    def _typed(self, value: Any, *types: type) -> Any:
        """An answer of the type the call gives; any other is nonsense (never read as "missing")."""
        if not (isinstance(value, types) and (bool in types or not isinstance(value, bool))):
            raise KeyringUnavailable(self._gone(answered=True))
        return value

    def get(self, where: Where, node_id: str, kind: SecretKind) -> str | None:
        value = self._ask("get", **_where(where), node=node_id, kind=kind.value)
        return None if value is None else str(self._typed(value, str))

    def set(self, where: Where, node_id: str, kind: SecretKind, value: str) -> None:
        self._ask("set", **_where(where), node=node_id, kind=kind.value, value=value)

    def delete(self, where: Where, node_id: str, kind: SecretKind) -> bool:
        return bool(self._typed(self._ask("delete", **_where(where), node=node_id, kind=kind.value), bool))

    def migrate(self, where: Where, node_id: str) -> int:
        return int(self._typed(self._ask("migrate", **_where(where), node=node_id), int))

    def check(self) -> str:
        return one_line(self._typed(self._ask("check"), str), 200)

    def close(self) -> None:
        """Close the helper's stdin (it exits); one that does not within EXIT_GRACE_S is killed."""
        self._end()

    def _gone(self, *, answered: bool) -> str:
        """End a helper that died or answered nonsense; why, in words."""
        code = self._end(kill=answered)
        what = "answered nonsense" if answered else f"ended (exit code {code})"
        return (f"The keyring helper process {what} during a keyring call; cadre-desktop starts "
                "another and asks again.")

    def _end(self, *, kill: bool = False) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if kill:
            proc.kill()
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        try:
            return proc.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def _where(where: Where) -> dict[str, Any]:
    return {"home": where.home_id, "legacy": where.legacy}


def _parse_answer(line: bytes, seq: int) -> dict[str, Any] | None:
    """The answer to request `seq`, or None: end of file, a line too long, not one answer to it."""
    if not line.endswith(b"\n"):
        return None
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("id") != seq or not ("result" in answer or "error" in answer):
        return None
    return answer


def _error_of(error: Any) -> SecretsError:
    """The helper's error as this side's SecretsError, its words bounded and on one line."""
    if not isinstance(error, dict):
        return KeyringUnavailable(f"{HELP_UNAVAILABLE} (the keyring helper answered nonsense)")
    code = one_line(error.get("code", ""), 40)
    message = one_line(error.get("message", ""), 600) or "The keyring failed."
    cls = ERRORS.get(code)
    return cls(message) if cls is not None else SecretsError(message)


# -- in the helper ---------------------------------------------------------------------------


def serve(requests: IO[bytes], answers: IO[bytes], calls: KeyringCalls) -> None:
    """Answer each request line until end of file (the host closed the pipe, or died)."""
    while True:
        line = requests.readline(MAX_LINE + 1)
        if not line:
            return
        answers.write(json.dumps(_answer(line, calls)).encode() + b"\n")
        answers.flush()


def _answer(line: bytes, calls: KeyringCalls) -> dict[str, Any]:
    seq: Any = None
    try:
        request = json.loads(line)
        seq = request["id"]
        return {"id": seq, "result": _run(request, calls)}
    except SecretsError as exc:  # already in words without a secret
        return {"id": seq, "error": {"code": exc.code, "message": exc.message}}
    except Exception as exc:  # a request we cannot read: its type only, never its text
        return {"id": seq, "error": {"code": "keyring_unavailable",
                                     "message": f"{HELP_UNAVAILABLE} (the keyring helper failed: {type(exc).__name__})"}}


def _run(request: dict[str, Any], calls: KeyringCalls) -> Any:
    op = request["op"]
    if op == "check":
        return calls.check()
    where = Where(request["home"], bool(request["legacy"]))
    node = str(request["node"])
    if op == "migrate":
        return calls.migrate(where, node)
    kind = SecretKind(request["kind"])
    if op == "get":
        return calls.get(where, node, kind)
    if op == "set":
        calls.set(where, node, kind, str(request["value"]))
        return None
    if op == "delete":
        return calls.delete(where, node, kind)
    raise ValueError("unknown operation")


def main() -> None:
    """The helper's entry: serve stdin until it closes. A Ctrl+C at the host's terminal is the
    host's to handle (it closes the pipe); the helper does not die of it mid-call."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from cadre_desktop.keyrings.keyring_calls import BackendCalls

    serve(sys.stdin.buffer, sys.stdout.buffer, BackendCalls())


if __name__ == "__main__":
    main()
