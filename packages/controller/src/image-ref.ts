// `image: <name>` in sandbox.yaml names a built image (@pi-sandbox/image); the controller turns it
// into that image's assets directory when it reads a config to create or prepare from, so the
// record keeps the directory the disk was made from, whatever the name points at later.
import { isImageName, type SandboxConfig } from "@pi-sandbox/config";
import { resolveImageRef } from "@pi-sandbox/image";

/**
 * `config` with `image` as an assets directory: a name is looked up in the image cache of `env`
 * (IMAGE_NOT_FOUND, with the build command in its hint, when it is not built); a path is kept.
 */
export async function withImageDir(
  config: SandboxConfig,
  env: NodeJS.ProcessEnv = process.env,
): Promise<SandboxConfig> {
  if (config.image === undefined || !isImageName(config.image)) return config;
  return { ...config, image: await resolveImageRef(config.image, env) };
}
