#!/bin/sh
# Install this cadre-desktop bundle, with its menu entry and icons.
#
#   ./install.sh                      for you: ~/.local/lib/cadre-desktop, ~/.local/bin/cadre-desktop,
#                                     ~/.local/share/applications, ~/.local/share/icons
#   sudo ./install.sh --prefix /usr/local     for everyone
#   ./install.sh --uninstall [--prefix DIR]   remove what it installed (your nodes' data stays)
#
# `cadre-desktop autostart on` (or "Start at login" in the tray menu) then points at
# the installed executable.
set -eu

APP=cadre-desktop
HERE="$(cd "$(dirname "$0")" && pwd -P)"
PREFIX="${HOME}/.local"
UNINSTALL=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX="$2"; shift 2 ;;
        --uninstall) UNINSTALL=1; shift ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
mkdir -p "$PREFIX"
PREFIX="$(cd "$PREFIX" && pwd -P)"
APPDIR="$PREFIX/lib/$APP"
ICONS="$PREFIX/share/icons/hicolor"

refresh() {
    command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$PREFIX/share/applications" || true
    command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$ICONS" || true
}

if [ "$UNINSTALL" = 1 ]; then
    rm -rf "$APPDIR"
    rm -f "$PREFIX/bin/$APP" "$PREFIX/share/applications/$APP.desktop"
    find "$ICONS" -path "*/apps/$APP.*" -delete 2>/dev/null || true
    refresh
    echo "removed $APP from $PREFIX"
    exit 0
fi

case "$APPDIR" in
    *[\"\`\$\\]*) echo "install.sh: $APPDIR has a character a menu entry cannot hold; pick another --prefix" >&2; exit 2 ;;
esac
[ -x "$HERE/$APP" ] && [ -d "$HERE/_internal" ] || { echo "install.sh: run it from the unpacked bundle" >&2; exit 2; }

rm -rf "$APPDIR.new"
mkdir -p "$APPDIR.new" "$PREFIX/bin" "$PREFIX/share/applications"
cp -a "$HERE/$APP" "$HERE/_internal" "$APPDIR.new/"
rm -rf "$APPDIR"
mv "$APPDIR.new" "$APPDIR"
ln -sfn "$APPDIR/$APP" "$PREFIX/bin/$APP"

# The menu entry runs the installed executable by its full path (quoted: the prefix may hold spaces).
grep -v '^Exec=' "$HERE/share/applications/$APP.desktop" > "$PREFIX/share/applications/$APP.desktop.new"
printf 'Exec="%s"\n' "$APPDIR/$APP" >> "$PREFIX/share/applications/$APP.desktop.new"
mv "$PREFIX/share/applications/$APP.desktop.new" "$PREFIX/share/applications/$APP.desktop"
(cd "$HERE/share/icons/hicolor" && find . -type f -name "$APP.*") | while read -r icon; do
    mkdir -p "$(dirname "$ICONS/$icon")"
    cp "$HERE/share/icons/hicolor/$icon" "$ICONS/$icon"
done
refresh

echo "installed $APP in $APPDIR"
case ":${PATH}:" in
    *":$PREFIX/bin:"*) ;;
    *) echo "note: $PREFIX/bin is not on your PATH; the menu entry works regardless" ;;
esac
