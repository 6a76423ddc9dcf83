"""dap.dev — dev mode: the whole pipeline on a laptop (``dap dev``) and tokens to try it (``dap token``).

Not the pod's job (the pod pulls, verifies, loads, swaps and reports): dev mode *assembles* a
pod, a control plane and a database on one machine, and sits above them, using the pod and the
server through their faces (``dap.resource_pod``, ``dap.server`` and its subpackages' faces) and
the control plane as a child process, as the pod meets it in production — import-linter's
contracts in pyproject.toml say so, and nothing below imports this package::

    config = dev.DevConfig(spec_dir=Path("examples/procurement"), workspace="default", ...)
    code = await dev.run(config)       # until Ctrl-C; stops the pod, the control plane, Postgres

Layout, activity-named modules: ``running`` (the run: start, register, wait, watch, stop),
``data`` (a database and pod state per spec directory, ``--reset``), ``control`` (the control
plane child), ``seeding`` (``<spec>/seed`` once served), ``approving`` (``--auto-approve``),
``banner`` (what it prints once it serves), ``fleet`` (``--fleet``: hands over to ``dap control
dev-fleet``), ``tokens`` (JWTs a dev server accepts), ``cli`` (``dap dev``, ``dap token``).
Errors are the pod's (``dap.resource_pod.errors``): a refusal is a ``ConfigError``.
"""

from dap.dev import tokens
from dap.dev.running import DevConfig, run

__all__ = ["DevConfig", "run", "tokens"]
