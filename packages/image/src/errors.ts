// The image package's coded errors: every failure names what went wrong and what to run instead.
import { CodedError, brandError, hasBrand, type CodedErrorOptions } from "@pi-sandbox/config";

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

const brand = Symbol.for("pi-sandbox.ImageError");

/** A failure of @pi-sandbox/image, with a code, a message and a hint. */
export class ImageError extends CodedError<ImageErrorCode> {
  override readonly name = "ImageError";

  constructor(code: ImageErrorCode, message: string, options: CodedErrorOptions = {}) {
    super(code, message, options);
    brandError(this, brand);
  }
}

/** True for an ImageError, also one from another installed copy of the package. */
export function isImageError(value: unknown): value is ImageError {
  return hasBrand(value, brand);
}
