# shellcheck shell=bash
# What `./scripts/run --headless` needs on a box with no desktop: a keyring. cadre-desktop
# keeps claim secrets only in one (a Secret Service on Linux) and never falls back to a
# file by itself. Sourced by scripts/run after _setup.sh, not run.
#
# When the keyring check (doctor's) passes, nothing happens. Else, the choice is the
# person's: CADRE_HEADLESS_KEYRING=gnome-keyring, or the answer to the question asked
# on a terminal. gnome-keyring installs gnome-keyring and dbus (apt) and runs the host in a
# D-Bus session of its own with GNOME Keyring unlocked by a password read now (from the
# terminal, hidden, or the first line of stdin): it reaches gnome-keyring-daemon on a pipe,
# never a command line, the environment or a file. The same password opens the same
# keyring (~/.local/share/keyrings) at every start. A keyring in a file (keyrings.alt) is
# used only when named by hand: PYTHON_KEYRING_BACKEND.

# keyring_missing: doctor's keyring check (a throwaway secret stored and deleted) finds no usable
# keyring at all. One that is there but refuses (locked) is not missing: unlocking it is the way,
# and the host and doctor say so. A check that cannot run at all says nothing either.
keyring_missing() {
    local status=0
    "$VENV/bin/python" -c 'import sys
from cadre_desktop.host.core.vault.secrets import SecretStore
from cadre_desktop.keyrings.keyring_names import KeyringUnavailable
store = SecretStore()
try:
    store.check_sync()
except KeyringUnavailable:
    sys.exit(3)
except Exception:
    pass
finally:
    store.close()' >/dev/null 2>&1 || status=$?
    [ "$status" -eq 3 ]
}

keyring_choices() {
    cat >&2 <<'EOF'
No keyring (Secret Service) answers on this machine, and cadre-desktop keeps claim secrets
only in one (it never writes them to a file by itself). Choose one:
  1) GNOME Keyring in a D-Bus session of its own: installs gnome-keyring and dbus (apt),
     asks for the keyring's password (the same one at every start)
  q) neither: stop here
Or name a keyring backend yourself in PYTHON_KEYRING_BACKEND (a file of keyrings.alt's is
taken only so).
Without a terminal: CADRE_HEADLESS_KEYRING=gnome-keyring, the password on stdin.
EOF
}

# headless_keyring ARGS...: returns when a keyring answers (or one was named by hand); with
# gnome-keyring chosen, runs the host in its session and never returns; else exits 2.
headless_keyring() {
    [ -z "${PYTHON_KEYRING_BACKEND:-}" ] || return 0  # chosen by hand: doctor and the host say if it works
    keyring_missing || return 0
    local choice="${CADRE_HEADLESS_KEYRING:-}"
    if [ -z "$choice" ] && [ -t 0 ]; then
        keyring_choices
        read -r -p "Choose [1/q]: " choice
        [ "$choice" = "1" ] && choice=gnome-keyring
    fi
    case "$choice" in
        gnome-keyring) run_in_keyring_session "$@" ;;
        "")
            keyring_choices
            exit 2 ;;
        *)
            echo "no keyring chosen ($choice); stopping. \`cadre-desktop doctor\` says the same." >&2
            exit 2 ;;
    esac
}

# run_in_keyring_session ARGS...: the host in a D-Bus session with GNOME Keyring, unlocked.
run_in_keyring_session() {
    STEPS=$((STEPS + 2))  # the packages, the session
    ensure_debs gnome-keyring dbus
    local password=""
    if [ -t 0 ]; then
        read -r -s -p "The keyring's password (a new keyring takes it as its own): " password
        echo >&2
    else
        IFS= read -r password || true
    fi
    if [ -z "$password" ]; then
        echo "no password given; stopping (an empty one would leave the keyring open to anyone)" >&2
        exit 2
    fi
    step "starting the headless host in a D-Bus session of its own, with GNOME Keyring unlocked"
    # printf is a builtin and <(...) a pipe: the password is on no command line and in no file;
    # the session script hands its stdin to gnome-keyring-daemon.
    exec dbus-run-session -- bash "$ROOT/scripts/_keyring_session.sh" "$VENV" "$@" < <(printf '%s' "$password")
}
