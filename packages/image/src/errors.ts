// The image package's coded errors: every failure names what went wrong and what to run instead.
import { defineCodedError } from "@pi-sandbox/config";

/** Stable codes of every error this package throws. */
export type ImageErrorCode =
  /** A host tool the build needs is missing (details.tool, details.install). */
  | "IMAGE_TOOL_MISSING"
  /** The build needs root (debootstrap, chroot). */
  | "IMAGE_NEEDS_ROOT"
  /** An unknown feature, a bad package name or size, or a Debian package that does not exist. */
  | "IMAGE_BAD_RECIPE"
  /** A name that does not follow the name rule. */
  | "IMAGE_INVALID_NAME"
  /** No built image of that name. */
  | "IMAGE_NOT_FOUND"
  /** A directory given to import is not a complete Gondolin assets directory. */
  | "IMAGE_INVALID"
  /** The build itself failed (a command, the network); details.logs names the log directory. */
  | "IMAGE_BUILD_FAILED";

const kind = defineCodedError<ImageErrorCode, "ImageError">("ImageError", "IMAGE_");

/** A failure of @pi-sandbox/image, with a code, a message and a hint. */
export class ImageError extends kind.Base {}

/** True for an ImageError, also one from another installed copy of the package; with `code`, only for that code. */
export const isImageError: (value: unknown, code?: ImageErrorCode) => value is ImageError = kind.is;
