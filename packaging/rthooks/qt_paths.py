# Run-time hook, in place of PyInstaller's PySide6 one (cadre-desktop.spec drops that).
#
# The stock hook imports PySide6.QtCore at start-up to register a qt.conf, in every
# process of the bundle: each node (`--node`), `--version`, every CLI call pays
# ~0.1 s and ~16 MB for a Qt it never uses. PySide6 from PyPI registers its own
# qt.conf when QtCore is first imported, so only the plugin path is set here, and
# Qt loads when (and only if) the tray imports it.


def _qt_paths():
    import os
    import sys

    if sys.platform == "win32":
        qt_dir = os.path.join(sys._MEIPASS, "PySide6")
    else:
        qt_dir = os.path.join(sys._MEIPASS, "PySide6", "Qt")
    os.environ["QT_PLUGIN_PATH"] = os.path.join(qt_dir, "plugins")


_qt_paths()
del _qt_paths
