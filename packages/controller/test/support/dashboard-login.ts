// A browser session on a test dashboard: the login link minted with its key, followed once
// (no redirect), and the session cookie it set, ready for a `cookie` header.
import { mintToken } from "../../src/dashboard/tokens.js";

/** Opens a session on the dashboard at `origin` (`http://127.0.0.1:<port>`); its `name=value` cookie. */
export async function dashboardSession(origin: string, key: string): Promise<string> {
  const login = await fetch(`${origin}/?token=${mintToken(key)}`, { redirect: "manual" });
  const cookie = login.headers.get("set-cookie");
  if (!cookie) throw new Error(`the dashboard at ${origin} set no cookie at login (status ${login.status})`);
  return cookie.split(";")[0]!;
}
