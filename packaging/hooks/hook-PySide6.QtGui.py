# The stock hook for PySide6.QtGui, trimmed to the plugins the tray needs (see _qt_trim.py).
import importlib.util
import os

from PyInstaller.utils.hooks.qt import add_qt6_dependencies

_spec = importlib.util.spec_from_file_location("_qt_trim", os.path.join(os.path.dirname(__file__), "_qt_trim.py"))
_qt_trim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_qt_trim)

hiddenimports, binaries, datas = _qt_trim.trim(*add_qt6_dependencies(__file__))
