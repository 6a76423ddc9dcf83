export { evaluate, evaluateCondition, type Context } from "./evaluate";
export { parse } from "./parse";
export { DateV, Dec, ExprError, type Value } from "./values";
