// The product-level test support lives in @pi-sandbox/controller/testing; this re-export keeps
// older imports working.
export {
  fetchText,
  makeSandbox,
  qemuFor,
  qemuGone,
  sleep,
  teardown,
  type Sandbox,
} from "@pi-sandbox/controller/testing";
