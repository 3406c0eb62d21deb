// What a terminal needs to reach HTTPS like every other guest process. The guest's HTTPS goes
// through the VM's TLS proxy, whose CA the guest's init adds to the system trust store and names
// in the environment it gives every exec (hence the agent, commands, services, setup and hooks):
// `NODE_EXTRA_CA_CERTS` for Node, which otherwise trusts only its bundled CAs, and `SSL_CERT_FILE`,
// `CURL_CA_BUNDLE`, `REQUESTS_CA_BUNDLE` for OpenSSL, curl and Python. ssh starts its sessions with
// a fresh environment, so Node in a terminal (Pi, npm) refused every HTTPS server
// (SELF_SIGNED_CERT_IN_CHAIN). `shell` therefore copies those variables, as the VM set them, into
// a profile file that a terminal's login shell reads. The names come from the VM's environment,
// not from this package: the controller does not know where the VM layer keeps its CA.

/** The guest file that gives terminal (ssh) sessions the VM's CA variables. */
export const GUEST_TLS_PROFILE = "/etc/profile.d/pi-sandbox-tls.sh";

/** The CA variables copied from the VM's environment into {@link GUEST_TLS_PROFILE}. */
export const TLS_VARIABLES = ["NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"] as const;

/** The Debian/Alpine system bundle: Node's fallback when the VM named no CA file for it. */
const SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

/**
 * A POSIX sh script, run in the guest with the VM's environment, that writes `target` (default
 * {@link GUEST_TLS_PROFILE}; created 0644, replaced atomically): one `export NAME=path` per
 * variable of {@link TLS_VARIABLES} that is set to a plain path (letters, digits, `_ . / -`; any
 * other value is left out rather than quoted), and, when none named a file for Node, a line that
 * points `NODE_EXTRA_CA_CERTS` at the system bundle if that file is readable at login. A variable
 * a terminal already has is kept.
 */
export function tlsProfileScript(target: string = GUEST_TLS_PROFILE): string {
  const dir = target.slice(0, target.lastIndexOf("/")) || "/";
  const header =
    "# Written by pi-sandbox: the CA variables the VM gives every other guest process (ssh resets the environment).";
  return [
    "set -e",
    "umask 022",
    `mkdir -p '${dir}'`,
    `t='${target}.tmp'`,
    "{",
    `  echo '${header}'`,
    `  for v in ${TLS_VARIABLES.join(" ")}; do`,
    '    eval "x=\\${$v:-}"',
    '    case "$x" in',
    '      /*) case "$x" in *[!A-Za-z0-9_./-]*) ;; *) echo "[ -n \\"\\${$v:-}\\" ] || export $v=$x" ;; esac ;;',
    "    esac",
    "  done",
    `  echo '[ -n "\${NODE_EXTRA_CA_CERTS:-}" ] || [ ! -r ${SYSTEM_BUNDLE} ] || export NODE_EXTRA_CA_CERTS=${SYSTEM_BUNDLE}'`,
    '} > "$t"',
    `mv -f "$t" '${target}'`,
  ].join("\n");
}
