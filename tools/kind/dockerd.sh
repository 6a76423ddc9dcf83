#!/usr/bin/env bash
# Makes a Docker engine available: installs Debian's docker.io when it is missing (root with
# apt-get only), and starts dockerd by hand when none answers (no systemd here), with the runc
# wrapper (tools/kind/runc-wrapper) as the default runtime so that privileged containers (kind's
# nodes) run where root lacks CAP_SYS_RESOURCE. Idempotent; dockerd keeps running afterwards.
#
# Exit codes: 0 engine ready; 3 no engine can run here (the reason on stderr).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log=/var/log/dap-dockerd.log

if docker info >/dev/null 2>&1; then exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "tools/kind: installing Debian's docker.io ..." >&2
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; } \
            || { echo "tools/kind: apt-get install docker.io failed" >&2; exit 3; }
    else
        echo "tools/kind: no dockerd, and not root with apt-get to install it" >&2
        exit 3
    fi
fi
if [[ $(id -u) != 0 ]]; then
    echo "tools/kind: dockerd is installed but not running, and only root can start it" >&2
    exit 3
fi
# The wrapper lives outside the work tree, so that a removed checkout cannot break the engine.
install -D -m 0755 "$here/runc-wrapper" /usr/local/libexec/dap/runc-wrapper
echo "tools/kind: starting dockerd (log: $log) ..." >&2
# 9>&-: a build lock (tools/lock.sh) held by a caller must not live on in the daemon.
setsid nohup dockerd \
    --add-runtime dap-runc=/usr/local/libexec/dap/runc-wrapper \
    --default-runtime dap-runc \
    >>"$log" 2>&1 </dev/null 9>&- &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then echo "tools/kind: dockerd ready" >&2; exit 0; fi
    sleep 1
done
echo "tools/kind: dockerd did not answer within 60 s; last lines of $log:" >&2
tail -n 20 "$log" >&2
exit 3
