#!/usr/bin/env bash
# Build the one-folder bundle of cadre-desktop with PyInstaller, on Linux or macOS.
#
#   packaging/build.sh [--dist DIR] [--work DIR] [--no-archive]
#
# Installs what the build needs first (Debian: binutils and the Qt xcb libraries through apt-get; PyInstaller
# into .venv through the `package` extra), then runs packaging/cadre-desktop.spec.
#   Linux  dist/cadre-desktop/            the bundle: ./cadre-desktop, ./install.sh, share/ (menu entry, icons,
#                                         AppStream metainfo); packaging/build-deb.sh makes the .deb from it
#          dist/cadre-desktop-<version>-linux-<arch>.tar.gz
#   macOS  dist/cadre-desktop.app         (no Dock icon: LSUIElement)
#          dist/cadre-desktop-<version>-macos-<arch>.zip
# macOS needs a python3 of 3.11 or later on PATH (python.org or Homebrew).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/_setup.sh"

DIST="$ROOT/dist"
WORK="$ROOT/build"
ARCHIVE=1
while (($#)); do
    case "$1" in
        --dist) DIST="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
        --work) WORK="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
        --no-archive) ARCHIVE=0; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

OS="$(uname -s)"
case "$OS" in
    # PyInstaller runs objcopy and strip, and bundles the libraries Qt's xcb plugin loads
    # only where they are installed: without QT_DEBS the bundle would lack them.
    Linux) ensure_debs python3-venv binutils "${QT_DEBS[@]}" ;;
    Darwin) ;;
    *) echo "build.sh is for Linux and macOS; on Windows run packaging\\build.ps1" >&2; exit 2 ;;
esac
if [ ! -x "$VENV/bin/python" ] && ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "build.sh: needs python3 3.11 or later on PATH to make .venv (found: $(python3 --version 2>&1))" >&2
    exit 2
fi
ensure_venv package

APP=cadre-desktop
APP_ID=org.cadre.desktop  # AppStream id; the macOS bundle identifier too
VERSION="$("$VENV/bin/python" -c 'import cadre_desktop; print(cadre_desktop.__version__)')"
ARCH="$(uname -m)"
started=$SECONDS
"$VENV/bin/python" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$DIST" --workpath "$WORK" "$ROOT/packaging/cadre-desktop.spec"

if [ "$OS" = Linux ]; then
    BUNDLE="$DIST/$APP"
    EXE="$BUNDLE/$APP"
    # The menu entry and icons, laid out as under a prefix; install.sh copies them there.
    install -D -m 0644 "$ROOT/packaging/linux/$APP.desktop" "$BUNDLE/share/applications/$APP.desktop"
    install -D -m 0644 "$ROOT/packaging/icons/$APP.svg" "$BUNDLE/share/icons/hicolor/scalable/apps/$APP.svg"
    for png in "$WORK/$APP/icons/png/"*.png; do  # rendered by the spec (icons/make_icons.py)
        size="$(basename "$png" .png)"
        install -D -m 0644 "$png" "$BUNDLE/share/icons/hicolor/${size}x${size}/apps/$APP.png"
    done
    install -d "$BUNDLE/share/metainfo"
    "$VENV/bin/python" "$ROOT/packaging/release-notes.py" --metainfo "$ROOT/packaging/linux/$APP_ID.metainfo.xml" \
        > "$BUNDLE/share/metainfo/$APP_ID.metainfo.xml"
    install -m 0755 "$ROOT/packaging/linux/install.sh" "$BUNDLE/install.sh"
    PRODUCT="$BUNDLE"
    if ((ARCHIVE)); then
        PRODUCT="$DIST/$APP-$VERSION-linux-$ARCH.tar.gz"
        tar -C "$DIST" -czf "$PRODUCT" "$APP"
    fi
else
    BUNDLE="$DIST/$APP.app"
    EXE="$BUNDLE/Contents/MacOS/$APP"
    PRODUCT="$BUNDLE"
    if ((ARCHIVE)); then
        PRODUCT="$DIST/$APP-$VERSION-macos-$ARCH.zip"
        ditto -c -k --sequesterRsrc --keepParent "$BUNDLE" "$PRODUCT"
    fi
fi

"$EXE" --version >/dev/null
echo "built $("$EXE" --version) in $((SECONDS - started)) s: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1))"
[ "$PRODUCT" = "$BUNDLE" ] || echo "archive: $PRODUCT"
