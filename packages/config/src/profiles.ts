// The resource profiles a sandbox.yaml picks by name (`profile: medium`): CPUs and memory for each.

/** Names of the resource presets. */
export type ProfileName = "tiny" | "small" | "medium" | "large" | "xlarge";

/** CPUs and memory given to a VM. */
export interface Resources {
  /** Virtual CPUs. */
  cpus: number;
  /** Memory in GiB. */
  memoryGiB: number;
}

/** The resource presets; `small` is the default. */
export const PROFILES: Readonly<Record<ProfileName, Readonly<Resources>>> = Object.freeze({
  tiny: Object.freeze({ cpus: 1, memoryGiB: 2 }),
  small: Object.freeze({ cpus: 2, memoryGiB: 4 }),
  medium: Object.freeze({ cpus: 4, memoryGiB: 8 }),
  large: Object.freeze({ cpus: 8, memoryGiB: 16 }),
  xlarge: Object.freeze({ cpus: 16, memoryGiB: 32 }),
});

/** Profile names in size order. */
export const PROFILE_NAMES = Object.freeze(Object.keys(PROFILES) as ProfileName[]);

/** The profile used when a config names none. */
export const DEFAULT_PROFILE: ProfileName = "small";
