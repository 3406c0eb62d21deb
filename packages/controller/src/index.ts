// The package's root export is the client: the action API, its types and help. The daemon and the
// CLI are programs (`pi-sandbox`, `dist/daemon/main.js`), not library surface.
export * from "./client/index.js";
