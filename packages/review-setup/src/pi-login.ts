// Refreshing the host's Pi login through Pi itself: ModelRuntime.getAuth() refreshes an OAuth
// credential under auth.json's lock and writes the new tokens back, exactly as a host Pi session
// does before a request. Pi's SDK is loaded only when a token actually needs refreshing.
import type { Provider } from "@earendil-works/pi-ai";
import { ReviewSetupError } from "./errors.js";

/** What to refresh, and how much validity the refreshed access token must have. */
export interface HostLoginRefreshRequest {
  /** Provider id as in auth.json. */
  provider: string;
  /** The host's auth.json. */
  authPath: string;
  /** Refresh unless the access token is valid at least this long. */
  minValidityMs: number;
  /** Cancels the wait for auth.json's lock (a refresh in flight finishes, as in Pi). */
  signal?: AbortSignal;
}

/** Refreshes the host login in place (auth.json); throws REVIEW_SETUP_TOKEN_UNUSABLE when it cannot. */
export type HostLoginRefresher = (request: HostLoginRefreshRequest) => Promise<void>;

/** Options of `refreshHostLoginWithPi`. */
export interface PiLoginOptions {
  /** Providers to register besides Pi's built-in ones (fixture providers in tests). */
  extraProviders?: readonly Provider[];
}

/** The default refresher: Pi's SDK (`@earendil-works/pi-coding-agent`, installed in this checkout). */
export async function refreshHostLoginWithPi(
  request: HostLoginRefreshRequest,
  options: PiLoginOptions = {},
): Promise<void> {
  const { provider, authPath } = request;
  const relogin = `Log in again on the host: run \`pi\`, then /login and choose ${provider}; then rerun this command.`;
  let sdk: typeof import("@earendil-works/pi-coding-agent");
  try {
    sdk = await import("@earendil-works/pi-coding-agent");
  } catch (error) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_TOKEN_UNUSABLE",
      `the host's ${provider} access token needs refreshing, but Pi's SDK (@earendil-works/pi-coding-agent) cannot be loaded here`,
      {
        hint: `Run npm ci in this checkout, or use Pi on the host once with a ${provider} model and rerun.`,
        cause: error,
      },
    );
  }
  let runtime: Awaited<ReturnType<typeof sdk.ModelRuntime.create>>;
  try {
    runtime = await sdk.ModelRuntime.create({
      authPath,
      modelsPath: null,
      allowModelNetwork: false,
      refreshOnCreate: false,
    });
    for (const extra of options.extraProviders ?? []) runtime.registerNativeProvider(extra);
  } catch (error) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_TOKEN_UNUSABLE",
      `Pi could not open the host's login store ${authPath}: ${error instanceof Error ? error.message : String(error)}`,
      { hint: relogin, details: { provider, authPath }, cause: error },
    );
  }
  if (!runtime.getProvider(provider)?.auth.oauth) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_TOKEN_UNUSABLE",
      `the host's ${provider} access token is expiring and Pi has no built-in OAuth refresh for ${provider} (an extension's provider?)`,
      {
        hint: `Use Pi on the host once with a ${provider} model (it refreshes the login), then rerun this command.`,
        details: { provider },
      },
    );
  }
  try {
    await runtime.getAuth(provider, { minOAuthValidityMs: request.minValidityMs, signal: request.signal });
  } catch (error) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_TOKEN_UNUSABLE",
      `Pi could not refresh the host's ${provider} login: ${error instanceof Error ? error.message : String(error)}`,
      { hint: relogin, details: { provider }, cause: error },
    );
  } finally {
    await runtime.settleCredentialWrites();
  }
}
