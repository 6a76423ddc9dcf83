"""dap.control.cli — the command line of the control plane: ``dap control ...`` and ``dap register``.

Thin click shells over the concerns below: they parse options (each also from ``DAP_<OPTION>``),
call into ``serving``, ``artifacts``, ``supply`` or ``kube`` and print. Nothing imports this
package but ``dap.cli``, which loads ``commands:control`` and ``commands:register`` lazily::

    commands     the ``control`` group (serve, keys, revoke, ...) and ``register``
    freezing     ``dap control freeze set|lift|list``
    policies     ``dap control policy set|show|remove|promote|approve``
    auditing     ``dap control log show|verify|monitor``
    controls     ``dap control region-control|cluster-control|dev-fleet``
    databases    what every one-shot command on the control's database shares (``--db``)
"""

__all__ = ["commands"]
