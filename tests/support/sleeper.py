"""A tiny stand-in node program for orchestrator tests.

Writes `ready.json` (pid, and which CADRE_* variables it saw, never their values
beyond the non-secret ones) into CADRE_NODE_DIR, then waits to be signalled.
SLEEPER_MODE=ignore-term ignores SIGTERM; SLEEPER_MODE=grandchild also starts a
grandchild in its group and records its pid (SLEEPER_GRANDCHILD=ignore-term: one
that ignores SIGTERM; =setsid: one that leaves the group for a session of its
own); SLEEPER_MODE=chatty writes SLEEPER_CHATTY_BYTES (default 4 MiB) of log
lines as fast as it can, then sleeps; SLEEPER_MODE=exit exits at once with
status 3.
"""

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
    for _ in range(int(os.environ.get("SLEEPER_CHATTY_BYTES", 4 << 20)) // len(line)):
        sys.stdout.buffer.write(line)
    sys.stdout.flush()
    print("sleeper: chatter done", flush=True)
while True:
    time.sleep(3600)
