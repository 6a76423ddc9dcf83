"""dap.control.supply — the supply-chain rules: transparency log, change freezes, signing policies.

What may reach a workspace and who can see that it did: every registration, freeze, lift and
policy change is an entry of the transparency log; freezes hold deployment; signing policies and
promotion rules gate artifacts. Pure rules beside their Postgres shells; it builds on ``trust``
and ``storage`` and knows neither evidence, clusters nor HTTP. Its modules are its face::

    freezes       what a snapshot deploys while a freeze holds (pure)
    promotions    an artifact reaches a ``to`` workspace only after it ran healthy in a ``from`` one (pure)
    contents      a snapshot's deployments: rows read, promotion rules and freezes applied
    transparency  the transparency log in Postgres: append, sign tree heads, answer proofs
    monitoring    a client of a control's log that trusts nothing but a public key
    freezing      freezes in Postgres: set, lift, list, expire
    policies      signing policies (k of n) and promotion rules in Postgres
"""

__all__ = ["contents", "freezes", "freezing", "monitoring", "policies", "promotions", "transparency"]
