// The host-local stand-in server on its own thread: 5-byte answers on any path, 256 KiB on /blob.
import { createServer } from "node:http";
import { parentPort } from "node:worker_threads";

const blob = Buffer.alloc(256 * 1024, 1);
const server = createServer((req, res) => {
  if (req.url === "/blob") {
    res.writeHead(200, { "content-length": blob.length });
    res.end(blob);
  } else {
    res.writeHead(200, { "content-length": 5 });
    res.end("hello");
  }
});
server.listen(0, "127.0.0.1", () => parentPort!.postMessage((server.address() as { port: number }).port));
