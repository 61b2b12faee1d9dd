# Shared set-up for scripts/run and scripts/test: system packages through apt-get
# where missing (one `apt-get update` first), then a virtualenv in .venv with the
# project installed in editable mode. Sourced, not run.
#
# Quiet on purpose: each step says in one line what it installs; the tools' own output
# (apt's progress, pip's build warnings) goes to a log that is shown only if the step fails.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

ensure_debs() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing system packages (apt-get): ${missing[*]}" >&2
    quietly "apt-get" $sudo apt-get update -q
    quietly "apt-get" env DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# quietly WHAT COMMAND...: run COMMAND with its output in a log; on failure show the log.
quietly() {
    local what="$1"; shift
    local log
    log="$(mktemp "${TMPDIR:-/tmp}/cadre-setup.XXXXXX")"
    "$@" >"$log" 2>&1 && { rm -f "$log"; return 0; }
    local status=$?
    echo "$what failed (exit $status); its output:" >&2
    cat "$log" >&2
    rm -f "$log"
    return "$status"
}

ensure_venv() {
    local extras="$1"
    if [ ! -x "$VENV/bin/python" ]; then
        echo "creating the virtualenv .venv" >&2
        quietly "python3 -m venv" python3 -m venv "$VENV" || { ensure_debs python3-venv; python3 -m venv "$VENV"; }
    fi
    local stamp="$VENV/.installed-$extras"
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        echo "installing cadre-desktop and its Python packages ($extras) into .venv (pip)" >&2
        quietly "pip" "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
        quietly "pip" "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[$extras]"
        touch "$stamp"
    fi
}

# What Qt's xcb platform plugin needs to open a window or a tray icon.
QT_DEBS=(libegl1 libgl1 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1 libdbus-1-3
         libglib2.0-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1
         libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1)
