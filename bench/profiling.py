"""Where ``dap serve`` spends its time under load: py-spy samples one process while ``wrk`` drives
it (``bench/rest.py --profile``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import loadgen


def profile(pid: int, base: str, paths: list[str], auth: dict[str, str], seconds: float) -> str:
    """Where ``dap serve`` spends its time on find-by-id under load: py-spy samples the process
    while ``wrk`` drives it; the top functions by own time and by time including callees."""
    import threading
    from collections import Counter

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return "profile: py-spy not installed (pip install py-spy)"
    out = Path(tempfile.mkdtemp(prefix="dap-prof-")) / "stacks.txt"
    spy_seconds = max(2, int(seconds))
    record = subprocess.Popen(
        [spy, "record", "-p", str(pid), "-d", str(spy_seconds), "-r", "250", "-f", "raw", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = threading.Thread(
        target=loadgen.load,
        args=(base, paths),
        kwargs={"seconds": spy_seconds + 1, "headers": auth, "warm": 0},
    )
    driver.start()
    record.wait()
    driver.join()
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    stacks = out.read_text()
    shutil.rmtree(out.parent, ignore_errors=True)
    for line in stacks.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("/")[-1] for f in stack.split(";")
        ]
        n = int(count)
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    lines = [f"profile of dap serve under find-by-id ({samples} samples, py-spy):", "  own time:"]
    lines += [f"    {100 * n / samples:5.1f}%  {name})" for name, n in own.most_common(45)]
    lines.append("  including callees:")
    lines += [f"    {100 * n / samples:5.1f}%  {name})" for name, n in total.most_common(80)]
    return "\n".join(lines)


if __name__ == "__main__":  # ``make bench`` runs every script here: this one is a helper
    print("bench/profiling.py: the py-spy profile of bench/rest.py --profile; nothing to run alone")
