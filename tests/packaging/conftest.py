import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.bundle import APP, build, build_deb


@pytest.fixture(scope="session")
def bundle(tmp_path_factory) -> Path:
    """The bundle's executable, built once per session by packaging/build.sh (~40 s on 2 cores).

    CADRE_BUNDLE_DIR names an already built bundle folder instead (to iterate on the tests).
    """
    if not sys.platform.startswith("linux"):
        pytest.skip("the bundle is built and smoke-tested on Linux")
    prebuilt = os.environ.get("CADRE_BUNDLE_DIR")
    folder = Path(prebuilt) if prebuilt else build(tmp_path_factory.mktemp("bundle"))
    exe = folder / APP
    assert exe.is_file() and os.access(exe, os.X_OK), f"no executable at {exe}"
    return exe


@pytest.fixture(scope="session")
def deb(bundle, tmp_path_factory) -> Path:
    """The .deb, built once per session from the session's bundle by packaging/build-deb.sh.

    --fast (gzip, not xz): the release's compression costs half a minute and tests nothing
    of ours. CADRE_DEB names an already built package instead.
    """
    if shutil.which("dpkg-deb") is None:
        pytest.skip("a .deb is built with dpkg's tools: this is not a Debian-based system")
    prebuilt = os.environ.get("CADRE_DEB")
    return Path(prebuilt) if prebuilt else build_deb(bundle.parent, tmp_path_factory.mktemp("deb"))
