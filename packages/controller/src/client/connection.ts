// The client's side of a daemon's Unix socket; the call itself lives in state/daemon-call.ts,
// where a daemon calling another instance's daemon (diff --against) finds it too.
export { assertOwnListener, callDaemon, type DaemonCallOptions } from "../state/daemon-call.js";
