"""The two starts that take no command: the tray app (`cadre-desktop`) and the headless
host (`cadre-desktop --headless`).

Apart from the commands, so that a start loads neither the parser with its every
command nor the control API's client (about 1.3 MB of the tray, bench/README.md,
issue 26), and so that OpenSSL's modules are kept out before anything else is
imported (`plainasync.py`): the tray app and its host speak plain HTTP only.
"""

from __future__ import annotations

import sys

from cadre_desktop.paths import Paths


def run_headless(paths: Paths) -> int:
    from cadre_desktop.net.plainasync import import_without_openssl

    import_without_openssl()
    from cadre_desktop.host.core.records.preflight import prepare_home
    from cadre_desktop.settings import load_settings

    prepare_home(paths)  # a home it cannot use is one message (exit 1), before settings are read there
    settings = load_settings(paths.settings_file)
    from cadre_desktop.cli.headless import run_headless as run

    return run(paths, settings)


def run_gui(argv: list[str]) -> int:
    from cadre_desktop.net.plainasync import import_without_openssl

    import_without_openssl()
    from cadre_desktop.ui.app import run_gui as run

    return run(argv)


def start(argv: list[str]) -> int:
    """`[]`: the tray app; `["--headless"]`: the headless host. A failure is one line on stderr
    (exit 1), as the commands say theirs; Ctrl-C is exit 130."""
    from cadre_desktop.errors import CadreError
    from cadre_desktop.paths import resolve_paths

    try:
        paths = resolve_paths()
        return run_headless(paths) if argv == ["--headless"] else run_gui(argv)
    except CadreError as exc:
        from cadre_desktop.cli.terminal import EXIT_FAILED, PROG, one_line

        print(f"{PROG}: {one_line(exc.message)}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
