"""An unrelated program that writes down every catchable signal it receives.

Started in a session of its own, so its pid is also its process group id: a
host that took it for a node child and signalled the "child's group" would hit
it. `signals.txt` in the folder given as argv[1] gets one line per signal.
"""

import os
import signal
import sys
import time

folder = sys.argv[1]


def note(signum, frame):
    with open(os.path.join(folder, "signals.txt"), "a") as fh:
        fh.write(f"{signal.Signals(signum).name}\n")


for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGQUIT, signal.SIGCONT, signal.SIGALRM):
    signal.signal(sig, note)
with open(os.path.join(folder, "ready"), "w") as fh:
    fh.write(str(os.getpid()))
while True:
    time.sleep(3600)
