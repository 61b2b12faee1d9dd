"""Files on disk, written so that nothing is lost: crash-safe 0600 writes (``atomicfile``: a temp
file, fsync, replace), bounded non-blocking reads of a regular file (``readfile``), and the
host's one writer thread (``groupwriter``: whole-file writes in the order asked, piled-up writes
of a file grouped). Basics: they import only the standard library and each other, never the
engine, the node or a front end.
"""
