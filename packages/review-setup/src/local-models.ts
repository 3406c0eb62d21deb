// The refresh's local-models step (`--model-server`): in the guest's agent dir, a `local` provider
// in models.json seeded from the model list the host read (model-server.ts), plus the extension in
// ../guest/local-models.ts, which reads the list again whenever Pi refreshes.
import { readFile } from "node:fs/promises";
import { shellQuote } from "@pi-sandbox/config";
import { ReviewSetupError } from "./errors.js";
import type { GuestSession } from "./guest.js";
import type { ReviewLayout } from "./layout.js";
import { MODEL_SERVER_KEY, type ModelServer, type ServedModels } from "./model-server.js";

/** Pi provider id of the model server in the guest (the extension refreshes this one). */
export const LOCAL_PROVIDER = "local";

/** The `local` provider of the guest's models.json: the server's base URL and the seed list. */
export function localProviderConfig(server: ModelServer, served: ServedModels): Record<string, unknown> {
  return {
    name: `Model server (host 127.0.0.1:${server.port})`,
    baseUrl: server.guestUrl,
    api: "openai-completions",
    // Pi needs a key for a custom provider. With --model-server-key, the guest variable holding
    // the secret's placeholder (Pi expands `$NAME`; the host's proxy puts the key in); else a
    // dummy, which a server without key checks ignores. Neither is the key.
    apiKey: server.key ? `$${MODEL_SERVER_KEY}` : "local",
    models: served.ids.map((id) => {
      const contextWindow = served.contextWindows?.[id];
      return contextWindow ? { id, contextWindow } : { id };
    }),
  };
}

/** The extension file, as shipped next to src/ and dist/. */
export const LOCAL_MODELS_EXTENSION = new URL("../guest/local-models.ts", import.meta.url);

// One node process in the guest: merge the provider into models.json (created 0600 if missing,
// other providers kept; exit 3 if that fails), then the guest's own request to the server through
// network.hostPorts (exit 4 if it fails), with the placeholder in variable `k` if given. The last
// line says why.
const INSTALL_JS =
  `const fs=require("fs");const [f,p,id,url,k]=process.argv.slice(1);` +
  `try{let j={};if(fs.existsSync(f)){j=JSON.parse(fs.readFileSync(f,"utf8"))}` +
  `j.providers=j.providers||{};j.providers[id]=JSON.parse(fs.readFileSync(p,"utf8"));` +
  `fs.writeFileSync(f,JSON.stringify(j,null,2)+"\\n",{mode:0o600});fs.rmSync(p)}` +
  `catch(e){console.log("models.json: "+e.message);process.exit(3)}` +
  `const h=k?{authorization:"Bearer "+(process.env[k]||"")}:{};` +
  `fetch(url,{headers:h,signal:AbortSignal.timeout(10000)}).then(r=>{console.log("HTTP "+r.status);process.exit(r.ok?0:4)},` +
  `e=>{console.log(String((e.cause&&e.cause.code)||e.message||e));process.exit(4)})`;

/**
 * In the guest's agent dir: the `local` provider in models.json, the extension in
 * `extensions/local-models.ts`, then a request from the guest to the server.
 */
export async function installLocalModels(
  guest: GuestSession,
  layout: ReviewLayout,
  server: ModelServer,
  served: ServedModels,
  options: { name: string; signal?: AbortSignal },
): Promise<void> {
  const { name, signal } = options;
  const agent = layout.agentDir;
  const extensions = `${agent}/extensions`;
  const pending = `${agent}/.local-provider.json`;
  const failed = (output: string) =>
    new ReviewSetupError("REVIEW_SETUP_STEP_FAILED", `local-models failed: ${output.trim().slice(-2000)}`, {
      hint: `Check the guest's agent directory: npx pi-sandbox exec ${name} -- ls -la ${agent}`,
      details: { step: "local-models", output },
    });
  const made = await guest.exec(`umask 077 && mkdir -p ${shellQuote(extensions)}`, { signal });
  if (made.exitCode !== 0) throw failed(made.output);
  await guest.write(`${extensions}/local-models.ts`, await readFile(LOCAL_MODELS_EXTENSION, "utf8"), { signal });
  await guest.write(pending, JSON.stringify(localProviderConfig(server, served)), { signal });
  const url = `${server.guestUrl}/models`;
  const probe = await guest.exec(
    `node -e ${shellQuote(INSTALL_JS)} ${shellQuote(`${agent}/models.json`)} ${shellQuote(pending)} ${LOCAL_PROVIDER} ${shellQuote(url)}` +
      (server.key ? ` ${MODEL_SERVER_KEY}` : ""),
    { signal },
  );
  if (probe.exitCode !== 0 && probe.exitCode !== 4) throw failed(probe.output);
  if (probe.exitCode !== 0) {
    const why = probe.output.trim().split("\n").pop()?.slice(0, 200) ?? "";
    throw new ReviewSetupError(
      "REVIEW_SETUP_MODEL_SERVER_UNREACHABLE",
      `the guest cannot reach the model server at ${url} (${why}), though the host reached ${server.hostUrl}/models`,
      {
        hint:
          `Check that the server listens on 127.0.0.1:${server.port} (not only on ::1) and that the instance lists ${server.port} ` +
          `in network.hostPorts (npx pi-sandbox inspect ${name}).`,
        details: { url, output: probe.output },
      },
    );
  }
}
