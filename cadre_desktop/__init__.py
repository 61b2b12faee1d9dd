"""cadre-desktop: host cadre nodes on a home computer, from the system tray."""

__version__ = "0.1.0"
APP_NAME = "cadre-desktop"
