// A test-only Pi extension: `/goto <entry id>` navigates the session tree as /tree does (Pi's RPC
// mode has no tree command; its fork and clone commands exist). It runs Pi's own navigateTree, so
// session_before_tree reaches the extension under test with the RPC UI, and says how it ended.

import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function gotoExtension(pi: ExtensionAPI): void {
  pi.registerCommand("goto", {
    description: "test only: navigate the session tree to an entry",
    handler: async (args, ctx) => {
      const result = await ctx.navigateTree(args.trim());
      ctx.ui.notify(`goto: ${result.cancelled ? "cancelled" : "moved"} leaf=${ctx.sessionManager.getLeafId()}`, "info");
    },
  });
}
