// A tiny app-side helper for the dap bridge (Node.js, no dependencies).
// handlers: { "module/entity/action": async (ctx, {resource_id, resource, params}) => ({data, new_state, events}) }
// Throw to answer 500 {error}: the server rolls back the action and every /ctx write made through ctx.
"use strict";
const http = require("http");

function ctxCaller(ctxUrl, ids) {
  const unix = ctxUrl.startsWith("unix:");
  const target = unix ? { socketPath: "/" + ctxUrl.slice(5).replace(/^\/+/, "") } : new URL(ctxUrl);
  const call = (primitive, op, body, joined = true) =>
    new Promise((resolve, reject) => {
      const headers = { "Content-Type": "application/json", "X-Svc-Invoke-Id": ids.invoke };
      if (joined) headers["X-Svc-Scope-Id"] = ids.scope;
      if (ids.traceparent) headers.traceparent = ids.traceparent; // the /ctx call joins the request's trace
      const options = unix
        ? { socketPath: target.socketPath, path: `/ctx/${primitive}/${op}`, method: "POST", headers }
        : { host: target.hostname, port: target.port, path: `/ctx/${primitive}/${op}`, method: "POST", headers };
      const req = http.request(options, (res) => {
        let text = "";
        res.on("data", (c) => (text += c));
        res.on("end", () => {
          const answer = text ? JSON.parse(text) : {};
          if (res.statusCode === 200) resolve(answer);
          else reject(Object.assign(new Error(`/ctx answered ${res.statusCode}: ${answer.detail}`), { status: res.statusCode, problem: answer }));
        });
      });
      req.on("error", reject);
      req.end(JSON.stringify(body));
    });
  return { call, entity: (op, named, key, body = {}) => call("entity", op, { named, key, ...body }) };
}

function serve(handlers, listen = process.env.SVC_APP_SOCKET || process.argv[2]) {
  const server = http.createServer((req, res) => {
    const reply = (status, body) => {
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.method === "GET" && req.url === "/health") return reply(200, { status: "ok" });
    const m = /^\/invoke\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(req.url);
    const handler = m && handlers[`${m[1]}/${m[2]}/${m[3]}`];
    if (!handler) return reply(500, { error: `no handler for ${req.url}` });
    let text = "";
    req.on("data", (c) => (text += c));
    req.on("end", async () => {
      const ids = {
        scope: req.headers["x-svc-scope-id"],
        invoke: req.headers["x-svc-invoke-id"],
        traceparent: req.headers["traceparent"], // W3C trace context of the invoke, sent back on /ctx
      };
      try {
        reply(200, (await handler(ctxCaller(req.headers["x-svc-ctx-url"], ids), JSON.parse(text))) || {});
      } catch (err) {
        reply(500, { error: String(err.message || err) });
      }
    });
  });
  if (!listen) throw new Error("usage: node app.js unix:///path/app.sock | http://127.0.0.1:PORT");
  if (listen.startsWith("unix:")) server.listen("/" + listen.slice(5).replace(/^\/+/, ""));
  else server.listen(Number(new URL(listen).port), new URL(listen).hostname);
  process.on("SIGTERM", () => server.close(() => process.exit(0)));
  return server;
}

module.exports = { serve };
