// Handlers loaded on their first call. Every CLI command and every daemon loads the action table
// (its names, argument declarations, routes and guards: what validation, routing, help and the
// safety checks read), but a call runs one handler: a handler whose code pulls in modules nothing
// else needs (the image builder, the dashboard's launcher, the patch applier) lives in a module of
// its own, imported by the action's `run` when the action is first called.

const LOADER = Symbol("handler loader");

/** A handler that imports its module on its first call. */
type LazyHandler<F> = F & { readonly [LOADER]: () => Promise<F> };

/**
 * A `run` (or `runLocally`) that calls the function `load` resolves to, loading it on the first
 * call only; a failed load is tried again on the next call.
 */
export function lazyHandler<F extends (...args: never[]) => Promise<unknown>>(load: () => Promise<F>): F {
  let loaded: Promise<F> | undefined;
  const loadOnce = (): Promise<F> => {
    if (!loaded) {
      loaded = load();
      loaded.catch(() => {
        loaded = undefined;
      });
    }
    return loaded;
  };
  const handler = async (...args: Parameters<F>): Promise<unknown> => (await loadOnce())(...args);
  return Object.assign(handler, { [LOADER]: loadOnce }) as unknown as LazyHandler<F>;
}

/** The loader of a handler made by `lazyHandler` (for tests: it loads without calling); else undefined. */
export function handlerLoader(run: unknown): (() => Promise<unknown>) | undefined {
  return typeof run === "function" && LOADER in run ? (run as LazyHandler<unknown>)[LOADER] : undefined;
}
