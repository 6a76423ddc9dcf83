# Sourced by the build scripts: one build of a thing at a time. `make test` starts some builds early
# in the background (tools/background.sh); a step that needs one of them later runs the same script,
# which waits here until the first build is done and then finds its result and reuses it.
#
#   take_lock FILE WHAT     hold FILE's lock (fd 9) until the script exits, saying when it waits

take_lock() {
    mkdir -p "$(dirname "$1")"
    exec 9>"$1"
    if ! flock -n 9; then
        echo "$2: waiting for the build already running (lock $1) ..." >&2
        flock 9
    fi
}
