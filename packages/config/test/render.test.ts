// renderConfig, the YAML that code writes a config in (review-setup's derived sandbox.yaml, `secrets
// add`): canonical, parsed back to an equal config, with defaults left out.
import { parseConfig, renderConfig } from "../src/index.js";

const FULL = `version: 1
profile: medium
resources: { memoryGiB: 6 }
diskGiB: 20
workspace: /srv/app/
image: /opt/guest
setup: [apt-get update, "make deps"]
resume: [./resume.sh]
network:
  allowedHosts: [registry.npmjs.org, "*.github.com"]
  hostPorts: [8000, 5432]
services:
  api:
    command: " npm run api "
    cwd: ./server/
    port: 4000
    env: { DB: "postgres://x", PORT_HINT: "1" }
    health: /health
    timeoutMs: 5000
    preview: { title: API, description: "REST" }
    previews:
      - { url: /docs, title: Docs }
      - folder: Admin
        links: [{ url: "https://example.com/a", title: A, description: d }]
  web:
    command: npm start
    preview: true
    env: { API: "\${services.api.publicURL}/v1" }
  mac:
    command: open .
    platforms: [darwin]
    health: process
`;

test("renders canonical YAML that parses back to an equal config", () => {
  const config = parseConfig(FULL);
  const text = renderConfig(config);
  expect(parseConfig(text)).toEqual(config);
});

test("leaves defaults out", () => {
  expect(renderConfig(parseConfig("version: 1\nservices:\n  web: { command: run, preview: true }\n"))).toBe(
    "version: 1\nprofile: small\ndiskGiB: 60\nworkspace: /workspace\nservices:\n  web:\n    command: run\n    preview: true\n",
  );
});

test("writes resources only where they differ from the profile", () => {
  const text = renderConfig(parseConfig(FULL));
  expect(text).toContain("resources:\n  memoryGiB: 6\n");
  expect(text).not.toContain("cpus");
});

test("writes network keys only when they hold something", () => {
  expect(renderConfig(parseConfig("version: 1\nnetwork: { hostPorts: [11434] }\n"))).toContain(
    "network:\n  hostPorts:\n    - 11434\n",
  );
  expect(renderConfig(parseConfig("version: 1\nnetwork: { allowedHosts: [], hostPorts: [] }\n"))).not.toContain(
    "network",
  );
});
