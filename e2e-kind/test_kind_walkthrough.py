"""The README's "On Kubernetes" section, run as written against this suite's cluster (issue 41).

Its ``shell`` blocks run in one ``bash -euo pipefail`` from the repository, with ``kind`` and
``kubectl`` on the PATH as the section says (the ones ``make e2e`` built) and these differences
only: the lines that build the images or create the cluster are the ones this suite ran already,
the cluster is the suite's (``--name``, its node's container), and the control's port-forward
takes a free port. The section ends on the tenant's REST API through the node and the
Workspace's phase. Runs last (its registration is a new version of the books app).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest
from conftest import KIND, KUBECTL, ROOT, Books

pytestmark = pytest.mark.e2e


def section_blocks(readme: str) -> list[str]:
    section = readme.split("\n## On Kubernetes\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```shell\n(.*?)```", section, re.S)


def test_the_sections_blocks_are_found() -> None:
    blocks = section_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 2, "the README's Kubernetes walk-through went missing"
    assert any("kubectl apply -k kustomize/overlays/kind" in b for b in blocks)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_readme_kubernetes_section_runs_as_written(
    books: Books, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cluster = os.environ.get("DAP_E2E_CLUSTER", "dap-e2e")
    port = _free_port()
    script = []
    for block in section_blocks((ROOT / "README.md").read_text()):
        for line in block.splitlines():
            if line.startswith(("make ", "kind create cluster")):
                continue  # what this suite did before its first test
            line = re.sub(r"--name dap\b", f"--name {cluster}", line)
            line = line.replace("dap-control-plane", f"{cluster}-control-plane")
            line = line.replace("8443:8443", f"{port}:8443").replace("127.0.0.1:8443", f"127.0.0.1:{port}")
            script.append(line)
    tools = tmp_path_factory.mktemp("tools")
    (tools / "kind").symlink_to(KIND)
    (tools / "kubectl").symlink_to(KUBECTL)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "KUBECONFIG": str(books.kube.kubeconfig)}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert '"data"' in done.stdout, done.stdout[-2000:]  # the REST answer through the node
    assert re.search(r"^books\s.*Ready", done.stdout, re.M), done.stdout[-2000:]
