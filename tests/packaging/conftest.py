import os
import sys
from pathlib import Path

import pytest

from tests.packaging.bundle import APP, build


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
