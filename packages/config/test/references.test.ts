// `${services.NAME.publicURL}` in a service's env: references order the start, missing, unpreviewed
// and cyclic ones are rejected by name, and resolvePublicUrlReferences fills in the URLs.
import {
  ConfigError,
  findServicePlaceholders,
  parseConfig,
  referencedServices,
  resolvePublicUrlReferences,
} from "../src/index.js";
import { issueAt, onlyIssue, rejection } from "./support/helpers.js";

/** Builds a config from `name: [extra service lines]` pairs. */
function services(spec: Record<string, string[]>): string {
  const body = Object.entries(spec)
    .map(([name, lines]) => [`  ${name}:`, "    command: run", ...lines.map((line) => `    ${line}`)].join("\n"))
    .join("\n");
  return `version: 1\nservices:\n${body}\n`;
}

describe("${services.NAME.publicURL} references", () => {
  test("a reference to a previewed service is kept unresolved and orders the start", () => {
    const config = parseConfig(
      services({
        web: ["env:", "  API_URL: ${services.api.publicURL}/v1"],
        api: ["preview: true"],
      }),
    );
    expect(config.services.web!.env).toEqual({ API_URL: "${services.api.publicURL}/v1" });
    expect(config.serviceOrder).toEqual(["api", "web"]);
  });

  test("without references the start order is the declaration order", () => {
    expect(parseConfig(services({ c: [], a: [], b: [] })).serviceOrder).toEqual(["c", "a", "b"]);
  });

  test("the order is a stable topological order over chains", () => {
    const config = parseConfig(
      services({
        front: ["env:", "  B: ${services.back.publicURL}", "  D: ${services.docs.publicURL}"],
        worker: [],
        back: ["preview: true", "env:", "  A: ${services.auth.publicURL}"],
        auth: ["preview: true"],
        docs: ["previews: [{ url: /, title: Docs }]"],
      }),
    );
    expect(config.serviceOrder).toEqual(["worker", "auth", "back", "docs", "front"]);
  });

  test("a service that only has `previews` links counts as previewed", () => {
    const config = parseConfig(
      services({ web: ["env:", "  D: ${services.docs.publicURL}"], docs: ["previews: [{ url: /, title: D }]"] }),
    );
    expect(config.serviceOrder).toEqual(["docs", "web"]);
  });

  test("a missing service is rejected at the env entry", () => {
    expect(onlyIssue(services({ web: ["env:", "  API: ${services.nope.publicURL}"] }))).toEqual({
      path: "services.web.env.API",
      message:
        "`services.web.env.API` refers to service nope, which is not declared under services; declare it or fix the name",
      line: 6,
      column: 12,
    });
  });

  test("a service without a preview is rejected", () => {
    expect(onlyIssue(services({ web: ["env:", "  API: ${services.api.publicURL}"], api: [] })).message).toBe(
      "`services.web.env.API` refers to the public URL of service api, which has no preview; add `preview: true` to api",
    );
  });

  test("a service excluded on the Linux guest is rejected", () => {
    const issue = onlyIssue(
      services({ web: ["env:", "  M: ${services.mac.publicURL}"], mac: ["preview: true", "platforms: [darwin]"] }),
    );
    expect(issue.path).toBe("services.web.env.M");
    expect(issue.message).toContain("which its platforms exclude on the guest (always Linux)");
  });

  test("an excluded service may refer to another excluded service", () => {
    const config = parseConfig(
      services({
        a: ["platforms: [darwin]", "env:", "  B: ${services.b.publicURL}"],
        b: ["preview: true", "platforms: [darwin]"],
      }),
    );
    expect(config.serviceOrder).toEqual([]);
  });

  test("a self-reference is a cycle and points to PUBLIC_URL", () => {
    expect(onlyIssue(services({ web: ["preview: true", "env:", "  ME: ${services.web.publicURL}"] })).message).toBe(
      "`services.web.env.ME` refers to web's own public URL, so web would have to start before itself; use $PUBLIC_URL, which pi-sandbox sets for previewed services",
    );
  });

  test("a two-service cycle is rejected once, naming the loop", () => {
    const issue = onlyIssue(
      services({
        a: ["preview: true", "env:", "  B: ${services.b.publicURL}"],
        b: ["preview: true", "env:", "  A: ${services.a.publicURL}"],
      }),
    );
    expect(issue.path).toBe("services.b.env.A");
    expect(issue.message).toContain("closes a cycle of references (a → b → a)");
  });

  test("a longer cycle is named in full", () => {
    const issue = onlyIssue(
      services({
        a: ["preview: true", "env:", "  X: ${services.b.publicURL}"],
        b: ["preview: true", "env:", "  X: ${services.c.publicURL}"],
        c: ["preview: true", "env:", "  X: ${services.a.publicURL}"],
      }),
    );
    expect(issue.message).toContain("(a → b → c → a)");
  });

  test("other ${services.…} forms are rejected; other ${…} text is left alone", () => {
    const error = rejection(services({ web: ["env:", "  P: ${services.api.port}", "  H: ${HOME}/x"], api: [] }));
    expect(error.issues).toHaveLength(1);
    expect(issueAt(error, "services.web.env.P").message).toBe(
      "`services.web.env.P` uses ${services.api.port}, which is not a supported reference; only ${services.NAME.publicURL} is",
    );
  });

  test("several reference problems are all reported", () => {
    const error = rejection(
      services({
        web: ["env:", "  A: ${services.x.publicURL}", "  B: ${services.y.publicURL} ${services.api.publicURL}"],
        api: [],
      }),
    );
    expect(error.issues.map((issue) => issue.path)).toEqual(["services.web.env.A", "services.web.env.B"]);
  });
});

describe("resolvePublicUrlReferences", () => {
  test("replaces every reference and leaves other text alone", () => {
    const env = {
      A: "${services.api.publicURL}/v1",
      B: "${services.api.publicURL}|${services.docs.publicURL}",
      C: "$HOME",
    };
    expect(resolvePublicUrlReferences(env, { api: "http://127.0.0.1:4001", docs: "http://127.0.0.1:4002" })).toEqual({
      A: "http://127.0.0.1:4001/v1",
      B: "http://127.0.0.1:4001|http://127.0.0.1:4002",
      C: "$HOME",
    });
  });

  test("accepts a Map", () => {
    expect(resolvePublicUrlReferences({ A: "${services.x.publicURL}" }, new Map([["x", "http://h"]]))).toEqual({
      A: "http://h",
    });
  });

  test("a reference without a URL throws CONFIG_UNRESOLVED_REFERENCE", () => {
    expect(() => resolvePublicUrlReferences({ A: "${services.api.publicURL}" }, {})).toThrow(
      expect.objectContaining({ code: "CONFIG_UNRESOLVED_REFERENCE" }) as ConfigError,
    );
    expect(() => resolvePublicUrlReferences({ A: "${services.toString.publicURL}" }, {})).toThrow(ConfigError);
  });

  test("referencedServices lists each referenced service once", () => {
    expect(
      referencedServices({ A: "${services.b.publicURL}${services.a.publicURL}", B: "${services.b.publicURL}" }),
    ).toEqual(["b", "a"]);
    expect(findServicePlaceholders("${services.x.other} ${services.y.publicURL}")).toEqual([
      { text: "${services.x.other}", service: undefined },
      { text: "${services.y.publicURL}", service: "y" },
    ]);
  });
});

test("names of Object.prototype members are not mistaken for declared services", () => {
  const error = rejection(services({ web: ["env:", "  A: ${services.constructor.publicURL}"] }));
  expect(issueAt(error, "services.web.env.A").message).toContain(
    "refers to service constructor, which is not declared",
  );
});

test("a __proto__ key is an unknown key, not a prototype change", () => {
  const error = rejection("version: 1\n__proto__: { profile: tiny }\n");
  expect(error.issues.map((issue) => issue.path)).toEqual(["__proto__"]);
  expect(({} as Record<string, unknown>).profile).toBeUndefined();
});
