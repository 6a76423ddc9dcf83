# Sourced by the build scripts: one build of a thing at a time. `make test` starts some builds early
# in the background at low priority (tools/background.sh); a step that needs one of them later runs
# the same script, which waits here until the first build is done, then finds its result and reuses
# it. A waiter lends the build its own priority: once someone waits for it, it is no background.
#
#   take_lock FILE WHAT     hold FILE's lock (fd 9) until the script exits, saying when it waits

take_lock() {
    mkdir -p "$(dirname "$1")"
    exec 9<>"$1" # read and write, not truncated: it names the holder's process group
    if ! flock -n 9; then
        echo "$2: waiting for the build already running (lock $1) ..." >&2
        local holder
        holder=$(head -c 20 "$1")
        if [[ $holder =~ ^[0-9]+$ ]]; then
            renice -n "$(nice)" -g "$holder" >/dev/null 2>&1 || true
            ionice -c 2 -n 4 -P "$holder" >/dev/null 2>&1 || true
        fi
        flock 9
    fi
    ps -o pgid= -p $$ | tr -d ' ' >"$1"
}
