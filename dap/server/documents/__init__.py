"""dap.server.documents — what a write means: lifecycle moves, references, derived values, the audit trail.

Above access (it asks who may), below web (which turns requests into calls here) and the coming
``workflows``/``events``. Everything here runs inside the write's transaction or is pure. Its
face is the modules in ``__all__`` (``from dap.server.documents import lifecycle``); the pure
rules behind them are inner modules::

    writing      body validation, column split, relations, children, on_delete effects, refusals
    reading      the JSON of a stored row and the child rows of a set of records
    lifecycle    draft → submitted → cancelled: create-and-submit, submit/cancel moves, delete rules
    filling      derived values of a write: related records, counters, action conditions
    auditing     the audit trail's rows, written in the write's transaction
    idempotency  Idempotency-Key: one effect and the first answer for a repeated create
    summaries    summary entities kept from submitted documents in the move's transaction
    archive      archived documents: moved out of the hot table, read, held, retention
    (inner)      references: who refers to a record and which moves that forbids; deriving:
                 applying a derivation plan (pure); a computed value's conversion is
                 ``fieldvalues.convert``'s

Modules load on first import (none is imported here): the boot path needs ``auditing`` only.
"""

__all__ = ["archive", "auditing", "filling", "idempotency", "lifecycle", "reading", "summaries", "writing"]
