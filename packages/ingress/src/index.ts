// Public API of @pi-sandbox/ingress, the preview gateway: everything not listed here is private.

// Gateway
export { PreviewGateway } from "./gateway.js";
export type { PreviewGatewayOptions } from "./gateway.js";
export type { PreviewActivity } from "./activity.js";

// Previews and links
export { adHocPreview, validatePreview } from "./preview.js";
export type {
  AdHocPreviewOptions,
  PreviewInfo,
  PreviewLink,
  PreviewReservation,
  PreviewSpec,
  ResolvedPreviewLink,
} from "./preview.js";

// Guest connections
export { guestVmConnector } from "./connector.js";
export { preloadForwarder } from "./undici-lib.js";
export type { GuestConnector, TcpConnectable } from "./connector.js";

// Port leases
export { JsonFilePortLeaseStore, MemoryPortLeaseStore } from "./lease-store.js";
export type { PortLeaseStore } from "./lease-store.js";

// Host and origin guards
export { DEFAULT_PREVIEW_ADDRESS, isAllowedHost, isLoopbackOrigin, isLoopbackV4 } from "./host-guard.js";

// Logging
export { silentLogger } from "./logger.js";
export type { IngressLogger } from "./logger.js";

// Errors
export { IngressError, isIngressError } from "./errors.js";
export type { IngressErrorCode, IngressErrorOptions } from "./errors.js";
