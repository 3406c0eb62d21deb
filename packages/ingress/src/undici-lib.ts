// undici, loaded when the first preview gets a guest port rather than with the package: the
// controller's daemon imports ingress for its gateway and port leases, and a daemon that only
// answers a call (or resumes an instance whose previews open later) need not load its ~110 modules
// before it serves.
type Undici = typeof import("undici");

let loading: Promise<Undici> | undefined;
let loaded: Undici | undefined;

/** undici, loaded on the first call; later calls share the same load. */
export function loadUndici(): Promise<Undici> {
  loading ??= import("undici").then((lib) => (loaded = lib));
  return loading;
}

/**
 * Starts loading what forwarding needs (undici), without waiting: the controller calls it as an
 * instance with previews boots, so the load runs while QEMU boots or resumes, not after it.
 */
export function preloadForwarder(): void {
  loadUndici().catch(() => undefined);
}

/** The error classes whose instances the forwarders tell apart. */
type UndiciErrorName = "SocketError" | "HeadersTimeoutError" | "HTTPParserError" | "ResponseExceededMaxSizeError";

/**
 * Whether `error` is undici's `name` error. Before undici is loaded no request has run, so
 * nothing can be one.
 */
export function isUndiciError(error: unknown, name: UndiciErrorName): boolean {
  const type = loaded?.errors[name];
  return type !== undefined && error instanceof type;
}
