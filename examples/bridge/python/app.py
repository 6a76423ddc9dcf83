"""The example app (Python): reserve an order's stock with entity/decrement inside the invoke's scope.

python examples/bridge/python/app.py unix:///tmp/store-app.sock
"""

from __future__ import annotations

from typing import Any

import svc_app


async def reserve(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    order = request["resource"]
    left = await ctx.entity("decrement", "store/item", order["item"], field="stock", amount=order["qty"])
    return {
        "data": {"stock": left["value"]},
        "new_state": "reserved",
        "events": [{"name": "order.reserved", "payload": {"qty": order["qty"]}}],
    }


if __name__ == "__main__":
    svc_app.serve({"store/order/reserve": reserve})
