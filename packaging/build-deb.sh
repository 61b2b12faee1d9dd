#!/usr/bin/env bash
# Build the Debian package of cadre-desktop from the Linux bundle that packaging/build.sh made.
#
#   packaging/build-deb.sh [--bundle DIR] [--out DIR] [--work DIR] [--fast]
#
#   --bundle DIR  the bundle folder (default dist/cadre-desktop)
#   --out DIR     where the .deb goes (default dist/)
#   --work DIR    scratch space; its debian/ is made anew (default build/deb)
#   --fast        gzip -1 instead of xz: seconds instead of half a minute (the tests use it)
#
# Only dpkg's own tools make it: dpkg-shlibdeps finds what the bundle's binaries load from
# the system and do not carry (the bundle's library folders are searched first, so what
# it carries is no dependency), dpkg-gencontrol writes the control file, dpkg-deb the archive.
#   /opt/cadre-desktop/                 the bundle
#   /usr/bin/cadre-desktop              a link to it
#   /usr/share/applications, icons/hicolor, metainfo    from the bundle's share/
#   /usr/share/doc/cadre-desktop/       copyright, changelog.gz (CHANGELOG.md), changelog.Debian.gz
# No maintainer scripts: the menu and icon caches follow through the triggers of the
# packages that own them, and nothing of ours lives outside these paths.
# Output: <out>/cadre-desktop_<version>-1_<arch>.deb, the version being the bundle's own.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/_setup.sh"

APP=cadre-desktop
HERE="$ROOT/packaging/linux/deb"
BUNDLE="$ROOT/dist/$APP"
OUT="$ROOT/dist"
WORK="$ROOT/build/deb"
FAST=0
while (($#)); do
    case "$1" in
        --bundle) BUNDLE="$(realpath -m "$2")"; shift 2 ;;
        --out) OUT="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
        --work) WORK="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
        --fast) FAST=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "build-deb.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
fail() { echo "build-deb.sh: $*" >&2; exit 1; }

[ "$(uname -s)" = Linux ] || fail "a .deb is built on Linux"
[ -x "$BUNDLE/$APP" ] && [ -d "$BUNDLE/_internal" ] && [ -f "$BUNDLE/share/applications/$APP.desktop" ] \
    || fail "no Linux bundle in $BUNDLE: run packaging/build.sh first"
# dpkg-shlibdeps and dpkg-gencontrol; and the libraries of Qt's Wayland plugin, which
# PyInstaller leaves to the system: dpkg-shlibdeps must find them to depend on them.
ensure_debs dpkg-dev libwayland-client0 libwayland-cursor0

# The bundle says what it is: "cadre-desktop 0.2.0 (commit 1a2b3c4d5e6f)".
read -r _ VERSION _ COMMIT < <("$BUNDLE/$APP" --version) || fail "$BUNDLE/$APP --version failed"
COMMIT="${COMMIT%)}"
# Python's pre-releases sort before the release in Debian only with a tilde: 0.3.0rc1 -> 0.3.0~rc1.
DEB_VERSION="$(sed -E 's/\.?(a|b|rc|dev)([0-9]+)$/~\1\2/' <<< "$VERSION")-1"
ARCH="$(dpkg --print-architecture)"
DEB="$OUT/${APP}_${DEB_VERSION}_${ARCH}.deb"
# Reproducible: dpkg-deb clamps file times to it, the Debian changelog is dated by it.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}"
started=$SECONDS

PKG="$WORK/debian/$APP"
rm -rf "$WORK/debian"
mkdir -p "$PKG/DEBIAN" "$PKG/opt/$APP" "$PKG/usr/bin" "$PKG/usr/share/doc/$APP" "$PKG/usr/share/lintian/overrides"
cp -a "$BUNDLE/$APP" "$BUNDLE/_internal" "$PKG/opt/$APP/"
cp -a "$BUNDLE/share/." "$PKG/usr/share/"
ln -s "/opt/$APP/$APP" "$PKG/usr/bin/$APP"
# Modes as Debian wants them whatever the builder's umask; shared libraries are not programs.
find "$PKG" -type d -exec chmod 0755 {} +
find "$PKG" -type f -exec chmod 0644 {} +
chmod 0755 "$PKG/opt/$APP/$APP"
# The fleet's etcd, a program too (host/fleetstate/member.py runs it only where it may be executed).
ETCD="$PKG/opt/$APP/_internal/etcdbin/etcd"
if [ -f "$ETCD" ]; then chmod 0755 "$ETCD"; fi

install -m 0644 "$HERE/copyright" "$PKG/usr/share/doc/$APP/copyright"
install -m 0644 "$HERE/lintian-overrides" "$PKG/usr/share/lintian/overrides/$APP"
gzip -9n < "$ROOT/CHANGELOG.md" > "$PKG/usr/share/doc/$APP/changelog.gz"
cp "$HERE/control" "$WORK/debian/control"
cat > "$WORK/debian/changelog" <<EOF
$APP ($DEB_VERSION) unstable; urgency=medium

  * Built from the $APP $VERSION bundle, commit $COMMIT.
  * What changed: /usr/share/doc/$APP/changelog.gz.

 -- $(sed -n 's/^Maintainer: //p' "$HERE/control")  $(date -R -u -d "@$SOURCE_DATE_EPOCH")
EOF
gzip -9n < "$WORK/debian/changelog" > "$PKG/usr/share/doc/$APP/changelog.Debian.gz"

if command -v appstreamcli >/dev/null; then
    appstreamcli validate --no-net "$PKG"/usr/share/metainfo/*.metainfo.xml >/dev/null \
        || { appstreamcli validate --no-net "$PKG"/usr/share/metainfo/*.metainfo.xml >&2; fail "the AppStream metainfo is not valid"; }
fi

cd "$WORK"
mapfile -t ELF < <(find "debian/$APP/opt" -type f \( -name "$APP" -o -name '*.so' -o -name '*.so.*' \))
# As installed paths: dpkg-shlibdeps looks for them inside debian/$APP first.
mapfile -t LIBDIRS < <(find "debian/$APP/opt" -type f -name 'lib*.so*' -printf '%h\n' | sort -u | sed "s|^debian/$APP||")
# A library found inside the package is no dependency; a system library it cannot find is
# an error. Warnings off: they are about how upstream linked its binaries, nothing to change here.
dpkg-shlibdeps -Tdebian/substvars --warnings=0 "${LIBDIRS[@]/#/-l}" "${ELF[@]}" \
    2> shlibdeps.log || { cat shlibdeps.log >&2; fail "dpkg-shlibdeps failed"; }
# An unversioned library it cannot find is only a warning, and would be no dependency: refuse.
if grep -i "find library" shlibdeps.log >&2; then
    fail "install the system libraries above (they are what the bundle needs from the system), then build again"
fi
dpkg-gencontrol -p"$APP" -cdebian/control -ldebian/changelog -Tdebian/substvars -P"debian/$APP"

COMPRESS=(-Zxz)
((FAST)) && COMPRESS=(-Zgzip -z1)
dpkg-deb --root-owner-group "${COMPRESS[@]}" --build "debian/$APP" "$DEB" >/dev/null
echo "built $DEB in $((SECONDS - started)) s ($(du -h "$DEB" | cut -f1))"
echo "Depends: $(dpkg-deb --field "$DEB" Depends)"
