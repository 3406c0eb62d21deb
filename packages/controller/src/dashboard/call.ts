// How the dashboard calls an action (the client's callAction in the dashboard's process; a fake in
// tests): the one thing its pieces share, kept apart so none imports another for it.
/** Calls one action (the dashboard's `callAction`, bound to its state root). */
export type CallFn = (input: Record<string, unknown>) => Promise<unknown>;

/** Calls one action in context `context` (another machine, over ssh). */
export type CallInFn = (context: string, input: Record<string, unknown>) => Promise<unknown>;
