"""The bundle's one entry point: the tray app, the headless host, the CLI, and `--node`."""

import sys

from cadre_desktop.cli import main

sys.exit(main())
