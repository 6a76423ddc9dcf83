import { defineConfig } from "vite";

// The bundle ships inside the Python package: dap serve finds it beside dap/server/web.
export default defineConfig({
  base: "/",
  build: {
    outDir: "../dap/server/web/bundle",
    emptyOutDir: true,
    target: "es2022",
    assetsDir: "assets",
  },
  test: { include: ["test/**/*.test.ts"] },
});
