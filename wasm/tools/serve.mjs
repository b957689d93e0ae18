// A static file server for the built page: no server logic, only the right content types
// (a .wasm must be application/wasm for streaming compilation) and no caching.
//
//   node wasm/tools/serve.mjs target/wasm-site [--port 8000]   (--port 0 picks a free port)
//
// As a module, `serve(root, port)` resolves to the listening server once it listens.

import { createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".jsonl": "application/jsonl",
  ".wasm": "application/wasm",
  ".ts": "text/plain; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
};

export function serve(root, port = 0, host = "127.0.0.1") {
  const base = resolve(root);
  const server = createServer((req, res) => {
    let path;
    try {
      path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    } catch {
      res.writeHead(400).end();
      return;
    }
    if (path.endsWith("/")) path += "index.html";
    const file = normalize(join(base, path));
    if (file !== base && !file.startsWith(base + sep)) {
      res.writeHead(403).end();
      return;
    }
    let stat;
    try {
      stat = statSync(file);
    } catch {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    if (!stat.isFile()) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    res.writeHead(200, {
      "content-type": TYPES[extname(file)] ?? "application/octet-stream",
      "content-length": stat.size,
      "cache-control": "no-store",
    });
    if (req.method === "HEAD") {
      res.end();
      return;
    }
    createReadStream(file).pipe(res);
  });
  return new Promise((ok, fail) => {
    server.once("error", fail);
    server.listen(port, host, () => ok(server));
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const root = args.find((a, i) => !a.startsWith("--") && args[i - 1] !== "--port");
  const at = args.indexOf("--port");
  const port = at >= 0 ? Number(args[at + 1]) : 8000;
  if (!root) {
    console.error("usage: node wasm/tools/serve.mjs DIR [--port N]");
    process.exit(2);
  }
  const server = await serve(root, port);
  const { port: bound } = server.address();
  console.log(`serving ${root} on http://127.0.0.1:${bound}/`);
}
