// Every action argument that names a host path, a port or a credential is marked where it is
// declared, and what a model's call reaches is derived from those marks (a new argument without
// one fails here, not in a review).
import { SOUNDS_LIKE_HOST_REACH } from "@pi-sandbox/config";
import { ACTIONS } from "../src/client/index.js";
import { hostPathArgs } from "../src/actions/kit/define.js";

test("every argument that sounds like it reaches the host carries a mark", () => {
  const unmarked = ACTIONS.flatMap((spec) =>
    spec.args
      .filter((a) => a.reach === undefined && SOUNDS_LIKE_HOST_REACH.test(`${a.name} ${a.type} ${a.text}`))
      .map((a) => `${spec.name}.${a.name}: ${a.text}`),
  );
  expect(unmarked).toEqual([]);
});

test("the host paths of a model's call are the marked arguments", () => {
  const paths = Object.fromEntries(
    ACTIONS.map((spec) => [spec.name, hostPathArgs(spec).map((a) => a.name)]).filter(([, args]) => args!.length > 0),
  );
  expect(paths).toEqual({
    prepare: ["config"],
    create: ["config"],
    doctor: ["config"],
    upload: ["from"],
    download: ["to"],
    "image-import": ["dir"],
    init: ["config"],
  });
});
