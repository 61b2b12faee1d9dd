"""Logs: a host process's logging set-up and limits (``logsetup``), repeats rate-limited
(``logfilter``), reading a log's end (``logtail``), the capped log file and the per-node pump
process of Windows (``logpump``) and the one log keeper process per home on POSIX
(``logkeeper``). The pump and the keeper run as ``python -I -S <file>``: they import only the
standard library and each other (found beside each other), never the rest of the package.
"""
