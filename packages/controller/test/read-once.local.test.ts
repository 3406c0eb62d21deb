// Read once, write once, without QEMU: create writes the guest .sandbox.yaml from the host config
// it parsed and does not read it back; a later start or services ensure reads the guest copy once
// (the agent's client is handed that parse); each preview opens once, on its service's real port,
// its origin reserved before the service starts (the service's PUBLIC_URL).
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { createLocalRuntime, fetchText, type LocalRuntime, type LocalRuntimeVm } from "../src/testing.js";
import { localDaemons, type LocalDaemons } from "./support/local-daemon.js";

const YAML = `version: 1
profile: tiny
diskGiB: 4
setup:
  - printf 'Hello from setup\\n' > index.html
services:
  api:
    command: exec python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
  web:
    command: printf '%s' "$API_URL" > api-url.txt && exec python3 -m http.server $PORT --bind 127.0.0.1
    env:
      API_URL: \${services.api.publicURL}
    health: /
    preview: true
`;

let dir: string;
let layout: StateLayout;
let runtime: LocalRuntime;
let daemons: LocalDaemons;
/** Reads of the guest .sandbox.yaml through the agent, by the controller or the agent's client. */
let guestReads: number;
/** Every PreviewGateway.open, in order. */
let opens: { key: string; guestPort: number }[];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-once-"));
  layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  runtime = createLocalRuntime();
  guestReads = 0;
  opens = [];
  const startAgent = runtime.startAgent.bind(runtime);
  runtime.startAgent = async (vm, options) => {
    const client = await startAgent(vm, options);
    const read = client.readGuestConfig.bind(client);
    client.readGuestConfig = (callOptions) => {
      guestReads++;
      return read(callOptions);
    };
    return client;
  };
  const openGateway = runtime.openGateway.bind(runtime);
  runtime.openGateway = (vm, options) => {
    const gateway = openGateway(vm, options);
    const open = gateway.open.bind(gateway);
    gateway.open = (spec, openOptions) => {
      opens.push({ key: spec.key, guestPort: spec.guestPort });
      return open(spec, openOptions);
    };
    return gateway;
  };
  daemons = localDaemons(layout, runtime);
  await writeFile(join(dir, "sandbox.yaml"), YAML);
});

afterEach(async () => {
  await daemons.close();
  for (const vm of [...runtime.live]) await vm.close();
  await rm(dir, { recursive: true, force: true });
});

const call = (action: Record<string, unknown>) => daemons.call(action);

async function servicePorts(name: string): Promise<Record<string, number>> {
  const { services } = await call({ action: "services", name, op: "status" });
  return Object.fromEntries((services as { name: string; port: number }[]).map((s) => [s.name, s.port]));
}

test("create reads no guest copy back and opens each preview once on its real port; ensure and start read it once", async () => {
  const created = await call({ action: "create", name: "once", config: join(dir, "sandbox.yaml") });
  expect(created.state).toBe("running");
  expect(guestReads).toBe(0);
  const ports = await servicePorts("once");
  expect(opens).toEqual([
    { key: "api", guestPort: ports.api },
    { key: "web", guestPort: ports.web },
  ]);
  const url = (key: string) =>
    (created.previews as { service: string; url: string }[]).find((p) => p.service === key)!.url;
  expect(await fetchText(url("api"))).toMatch(/^200 /);
  expect(await fetchText(`${url("web")}index.html`)).toBe("200 Hello from setup\n");
  // web's ${services.api.publicURL} is api's preview origin, reserved before either started.
  expect(await fetchText(`${url("web")}api-url.txt`)).toBe(`200 ${new URL(url("api")).origin}`);

  // A later ensure reads the guest copy, which the user may have edited there, once.
  guestReads = 0;
  opens = [];
  const [vm] = [...runtime.live] as LocalRuntimeVm[];
  const guestCopy = vm!.local.hostPath("/workspace/.sandbox.yaml");
  expect(await readFile(guestCopy, "utf8")).toBe(YAML);
  await writeFile(
    guestCopy,
    `${YAML}  docs:\n    command: exec python3 -m http.server $PORT --bind 127.0.0.1\n    preview: true\n`,
  );
  const ensured = await call({ action: "services", name: "once", op: "ensure" });
  expect(guestReads).toBe(1);
  expect(ensured.started).toEqual(["docs"]);
  const after = await servicePorts("once");
  expect(opens).toEqual([
    { key: "api", guestPort: after.api },
    { key: "web", guestPort: after.web },
    { key: "docs", guestPort: after.docs },
  ]);
  expect(after.api).toBe(ports.api);
  const docs = (ensured.previews as { service: string; url: string }[]).find((p) => p.service === "docs")!;
  expect(await fetchText(`${docs.url}index.html`)).toBe("200 Hello from setup\n");

  // A start reads it once too, and reopens each preview once, on the same URL.
  await call({ action: "stop", name: "once" });
  guestReads = 0;
  opens = [];
  const started = await call({ action: "start", name: "once" });
  expect(guestReads).toBe(1);
  expect(opens.map((o) => o.key)).toEqual(["api", "web", "docs"]);
  expect((started.previews as { url: string }[]).map((p) => p.url)).toContain(url("web"));
  expect(await fetchText(`${url("web")}index.html`)).toBe("200 Hello from setup\n");
});
