# Sourced by the build scripts of the Go programs the tests run (Dex, Jaeger, Prometheus): their one
# way to build from the Go module proxy into a cache outside the repository, reused when there.
#
#   go_tool NAME TITLE OUT "BINARY..." PACKAGE...
#       builds PACKAGE... into OUT unless every BINARY is already there; one build at a time
#       (lock.sh); exits 3 when no Go toolchain is installed, so that callers can tell "cannot
#       build here" from "the build failed". The caller prints what its callers read.

go_tool() {
    local name=$1 title=$2 out=$3 binaries=$4 binary
    shift 4
    take_lock "$out.lock" "tools/$name"
    local ready=1
    for binary in $binaries; do
        [[ -x "$out/$binary" ]] || ready=0
    done
    if ((ready)); then
        echo "tools/$name: reusing $out" >&2
        return 0
    fi
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
        PATH=/usr/local/go/bin:$PATH
    fi
    if ! command -v go >/dev/null 2>&1; then
        echo "tools/$name: no Go toolchain on PATH (nor /usr/local/go); cannot build $title" >&2
        exit 3
    fi
    mkdir -p "$(dirname "$out")"
    go_tool_tmp=$(mktemp -d "$out.build.XXXXXX") # global: the EXIT trap outlives this function
    trap 'rm -rf "$go_tool_tmp"' EXIT
    local start=$SECONDS
    echo "tools/$name: building $title from the Go module proxy ..." >&2
    CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags "-s -w" -o "$go_tool_tmp/" "$@"
    rm -rf "$out"
    mv "$go_tool_tmp" "$out"
    trap - EXIT
    echo "tools/$name: built in $((SECONDS - start)) s into $out" >&2
}
