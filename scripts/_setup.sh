# shellcheck shell=bash
# Shared set-up for scripts/run and scripts/test: system packages through apt-get
# where missing (one `apt-get update` first), then a virtualenv in .venv with the
# project installed in editable mode. Sourced, not run.
#
# Each step says what it does as a numbered line ("[2/4] installing ... "), a long one
# says it is still at work every few seconds with the time so far, and each ends with
# "done (N s)". The tools' own output (apt's progress, pip's build warnings) goes to a
# log that is shown only if the step fails. A step with nothing to do is silent (it
# keeps its number), so a run once everything is installed prints nothing of set-up.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STEP=0
#: How many steps the script has (it sets its own after sourcing this).
STEPS=3
#: Seconds between "still ..." lines of a long step.
TICK_S="${TICK_S:-10}"

# step WORDS...: the next numbered step's line.
step() {
    STEP=$((STEP + 1))
    echo "[$STEP/$STEPS] $*" >&2
}

# skip: a step with nothing to do keeps its number, silently.
skip() {
    STEP=$((STEP + 1))
}

ensure_debs() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
    done
    if ! ((${#missing[@]})); then
        skip
        return 0
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    step "installing system packages (apt-get): ${missing[*]}"
    wait_for_apt || return 1
    local lock=(-o "DPkg::Lock::Timeout=$APT_WAIT_S")  # apt waits too, for one that starts meanwhile
    quietly "apt-get update" $sudo apt-get "${lock[@]}" update -q
    quietly "apt-get install" env DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock[@]}" install -y -q \
        --no-install-recommends "${missing[@]}"
}

#: How long to wait for another apt or dpkg (a fresh machine upgrades itself at boot), in seconds.
APT_WAIT_S="${APT_WAIT_S:-600}"
#: The locks apt and dpkg hold while they work.
APT_LOCKS="${APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}"

# apt_lock_holder: the pid of a process that holds one of APT_LOCKS now (nothing when none),
# from the kernel's own table of locks (/proc/locks; no fuser or lsof needed, no root).
apt_lock_holder() {
    local file inode
    [ -r /proc/locks ] || return 0
    for file in $APT_LOCKS; do
        inode="$(stat -L -c %i "$file" 2>/dev/null)" || continue
        awk -v inode="$inode" '$2 != "->" { n = split($6, id, ":"); if (id[n] == inode) { print $5; exit } }' /proc/locks
    done | head -n 1
}

# wait_for_apt: while another apt or dpkg holds its lock, say so once and wait, APT_WAIT_S at most.
wait_for_apt() {
    local holder start=$SECONDS
    holder="$(apt_lock_holder)"
    [ -n "$holder" ] || return 0
    echo "      waiting for another apt/dpkg (pid $holder) to finish, up to $APT_WAIT_S s …" >&2
    while [ -n "$holder" ]; do
        if ((SECONDS - start >= APT_WAIT_S)); then
            echo "another apt/dpkg (pid $holder) still holds its lock after $APT_WAIT_S s; let it finish" \
                 "(or end it), then run this again" >&2
            return 1
        fi
        sleep 1
        holder="$(apt_lock_holder)"
    done
    echo "      done: waiting for another apt/dpkg ($((SECONDS - start)) s)" >&2
}

# quietly WHAT COMMAND...: run COMMAND with its output in a log, saying "still WHAT (N s)"
# every TICK_S seconds and "done (N s)" at the end; on failure show the log.
quietly() {
    local what="$1"; shift
    local log start ticker status=0
    log="$(mktemp "${TMPDIR:-/tmp}/cadre-setup.XXXXXX")"
    start=$SECONDS
    ( while sleep "$TICK_S"; do echo "      still: $what ($((SECONDS - start)) s)" >&2; done ) &
    ticker=$!
    "$@" >"$log" 2>&1 || status=$?
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true  # the ticker ends by the kill (143): not a failure
    if [ "$status" -eq 0 ]; then
        echo "      done: $what ($((SECONDS - start)) s)" >&2
        rm -f "$log"
        return 0
    fi
    echo "$what failed (exit $status); its output:" >&2
    cat "$log" >&2
    rm -f "$log"
    return "$status"
}

ensure_venv() {
    local extras="$1"
    if [ ! -x "$VENV/bin/python" ]; then
        step "creating the virtualenv .venv"
        quietly "python3 -m venv" python3 -m venv "$VENV" || { ensure_debs python3-venv; python3 -m venv "$VENV"; }
    else
        skip
    fi
    local stamp="$VENV/.installed-$extras"
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        step "installing cadre-desktop and its Python packages ($extras) into .venv (pip; a minute the first time)"
        quietly "pip upgrade" "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
        quietly "pip install" "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "${ROOT}[$extras]"
        touch "$stamp"
    else
        skip
    fi
}

# What Qt's xcb platform plugin needs to open a window or a tray icon.
# shellcheck disable=SC2034  # used by the scripts that source this file
QT_DEBS=(libegl1 libgl1 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1 libdbus-1-3
         libglib2.0-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1
         libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1)
