"""A tiny stand-in node program for orchestrator tests.

Writes `ready.json` (pid, and which CADRE_* variables it saw, never their values
beyond the non-secret ones) into CADRE_NODE_DIR, then waits to be signalled.
SLEEPER_MODE=ignore-term ignores SIGTERM; SLEEPER_MODE=grandchild also starts a
grandchild in its group and records its pid (SLEEPER_GRANDCHILD=ignore-term: one
that ignores SIGTERM; =setsid: one that leaves the group for a session of its
own); SLEEPER_MODE=chatty writes SLEEPER_CHATTY_BYTES (default 4 MiB) of log
lines as fast as it can (SLEEPER_CHATTY_RATE bytes/s when set; SLEEPER_CHATTY_KIND
=no-newlines or =binary: blocks with no line break at all), then sleeps;
SLEEPER_MODE=ticker writes "sleeper: tick N" every 20 ms forever;
SLEEPER_MODE=exit exits at once with status 3.
"""

import itertools
import json
import os
import signal
import subprocess
import sys
import time

mode = os.environ.get("SLEEPER_MODE", "")
if mode == "exit":
    print("sleeper: exiting at once", flush=True)
    sys.exit(3)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

info = {
    "pid": os.getpid(),
    "pgid": os.getpgid(0) if hasattr(os, "getpgid") else None,
    "vars": sorted(k for k in os.environ if k.startswith("CADRE_")),
    "api_port": os.environ.get("CADRE_API_PORT"),
    "node_id": os.environ.get("CADRE_NODE_ID"),
    "cwd": os.getcwd(),
}
GRANDCHILD = {
    "": "",
    "ignore-term": "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n",
    "setsid": "import os\nos.setsid()\n",
}
if mode == "grandchild":
    prelude = GRANDCHILD[os.environ.get("SLEEPER_GRANDCHILD", "")]
    child = subprocess.Popen([sys.executable, "-c", prelude + "import time\nwhile True: time.sleep(60)"])
    info["grandchild"] = child.pid
node_dir = os.environ["CADRE_NODE_DIR"]
tmp = os.path.join(node_dir, "ready.json.tmp")
with open(tmp, "w") as fh:
    json.dump(info, fh)
os.replace(tmp, os.path.join(node_dir, "ready.json"))
print("sleeper: ready", flush=True)
if mode == "chatty":
    line = b"sleeper: chatter " + b"x" * 100 + b"\n"
    kind = os.environ.get("SLEEPER_CHATTY_KIND", "lines")
    block = {"lines": line * (65536 // len(line)), "no-newlines": b"y" * 65536,
             "binary": bytes(b for b in range(256) if b != 10) * 257}[kind]
    rate = float(os.environ.get("SLEEPER_CHATTY_RATE", 0))
    total, written, began = int(os.environ.get("SLEEPER_CHATTY_BYTES", 4 << 20)), 0, time.monotonic()
    while written < total:
        sys.stdout.buffer.write(block)
        written += len(block)
        ahead = written / rate - (time.monotonic() - began) if rate else 0
        if ahead > 0:
            sys.stdout.flush()
            time.sleep(ahead)
    sys.stdout.flush()
    print("\nsleeper: chatter done", flush=True)
if mode == "ticker":
    for tick in itertools.count():
        print(f"sleeper: tick {tick}", flush=True)
        time.sleep(0.02)
while True:
    time.sleep(3600)
