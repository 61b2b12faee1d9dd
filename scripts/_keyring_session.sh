# shellcheck shell=bash
# Run by scripts/_keyring.sh inside `dbus-run-session`: GNOME Keyring's Secret Service started
# on this session's bus and its login keyring unlocked (made, the first time) with the password
# on stdin; then the host (`.venv/bin/cadre-desktop ARGS...`) in its place. The session, and the
# keyring with it, ends with the host. Usage: bash _keyring_session.sh VENV ARGS...
set -euo pipefail
venv="$1"
shift
if ! gnome-keyring-daemon --unlock --components=secrets >/dev/null; then
    echo "gnome-keyring-daemon did not start; see \`cadre-desktop doctor\`" >&2
    exit 1
fi
exec "$venv/bin/cadre-desktop" "$@" </dev/null
