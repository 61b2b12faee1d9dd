"""A child that takes a node's work lock (flock) and holds it: `python -c HOLD_LOCK LOCKFILE`.

It writes its pid into the lock file, says `locked` on stdout once it holds the lock,
and then sleeps for a minute (the test kills it long before).
"""

HOLD_LOCK = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.pwrite(fd, str(os.getpid()).encode(), 0)\n"
    "print('locked', flush=True)\n"
    "time.sleep(60)\n"
)
