// `destroy` on a terminal without -f or --confirm: the CLI asks for the name instead of failing.
// Off a terminal (scripts, pipes) nothing is asked and the action's own check stands.

import { createInterface } from "node:readline/promises";
import { ControllerError } from "../errors.js";

/** Asks one question and resolves with the line typed. */
export type Ask = (question: string) => Promise<string>;

/** Asks on the terminal: the question on stderr, the answer from stdin. */
export const askOnTerminal: Ask = async (question) => {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return await rl.question(question);
  } finally {
    rl.close();
  }
};

/**
 * `action` ready to send: a destroy with no confirmation gets one by asking for the entry's name
 * (when `ask` is given, i.e. on a terminal); a different answer is CONTROLLER_CONFIRM_MISMATCH
 * before anything is sent. Other actions pass unchanged.
 */
export async function confirmDestroy(action: Record<string, unknown>, ask?: Ask): Promise<Record<string, unknown>> {
  if (action.action !== "destroy" || action.confirm !== "" || !ask) return action;
  const name = String(action.name);
  const what = action.kind === "templates" ? "template" : "instance";
  const answer = (await ask(`Destroy ${what} ${name}, its disk and logs, for good? Type its name to confirm: `)).trim();
  if (answer !== name) {
    throw new ControllerError("CONTROLLER_CONFIRM_MISMATCH", `${name} was not destroyed: the answer was not its name`, {
      hint: "Type the name exactly, or pass -f to destroy without asking.",
      details: { name, confirm: answer },
    });
  }
  return { ...action, confirm: name };
}
