// The example app (Node): reserve an order's stock with entity/decrement inside the invoke's scope.
"use strict";
const { serve } = require("./svc_app");

serve({
  "store/order/reserve": async (ctx, { resource }) => {
    const left = await ctx.entity("decrement", "store/item", resource.item, { field: "stock", amount: resource.qty });
    return { data: { stock: left.value }, new_state: "reserved", events: [{ name: "order.reserved", payload: { qty: resource.qty } }] };
  },
});
