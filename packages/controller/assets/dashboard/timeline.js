// The ledger of the instance whose details are open, as a timeline: newest first, filtered by kind,
// each entry added as it is written (server-sent events from /api/audit). Entries go into the page
// as text (textContent), never as HTML: a ledger holds what the model and the guest wrote.

/** Entries kept on the page; older ones are dropped from the bottom. */
const MAX_ENTRIES = 1000;

let source;
let name;
/** The context (another machine) of the instance shown; undefined for this machine. */
let context;
/**
 * The newest entry shown of each ledger (through a context, this machine's and the other one's):
 * a stream that reconnects starts over, and what is shown is skipped.
 */
let newest = new Map();

const list = () => document.querySelector("#timeline");
const kindSelect = () => document.querySelector("#timeline-kind");

/** One entry: its time, kind and what happened. */
function item(entry) {
  const li = document.createElement("li");
  li.dataset.kind = entry.kind;
  li.dataset.seq = String(entry.seq);
  if (entry.machine) li.dataset.machine = entry.machine;
  const time = document.createElement("time");
  time.dateTime = entry.at;
  time.textContent = new Date(entry.at).toLocaleString();
  const kind = document.createElement("span");
  kind.className = "kind";
  kind.textContent = entry.kind;
  const what = document.createElement("span");
  what.className = "what";
  what.textContent = entry.text;
  if (entry.machine) {
    // Through a context, two ledgers: this machine's (what was sent from here) and the other one's.
    const machine = document.createElement("span");
    machine.className = "machine";
    machine.textContent = entry.machine;
    li.append(time, " ", machine, " ", kind, " ", what);
  } else li.append(time, " ", kind, " ", what);
  return li;
}

function follow() {
  source?.close();
  list().replaceChildren();
  document.querySelector("#timeline-note").textContent = "";
  newest = new Map();
  const query = new URLSearchParams({ name });
  if (context) query.set("context", context);
  if (kindSelect().value) query.append("kind", kindSelect().value);
  source = new EventSource(`/api/audit?${query}`);
  source.addEventListener("kinds", (event) => {
    const select = kindSelect();
    if (select.options.length > 1) return;
    for (const kind of JSON.parse(event.data).kinds) {
      const option = document.createElement("option");
      option.value = kind;
      option.textContent = kind;
      select.append(option);
    }
  });
  source.addEventListener("entries", (event) => {
    const shown = list();
    for (const entry of JSON.parse(event.data).entries) {
      // Each machine's ledger numbers its own entries.
      const key = entry.machine ?? "";
      if (entry.seq <= (newest.get(key) ?? 0)) continue;
      newest.set(key, entry.seq);
      shown.prepend(item(entry));
    }
    while (shown.children.length > MAX_ENTRIES) shown.lastElementChild.remove();
  });
  source.addEventListener("failure", (event) => {
    const { error } = JSON.parse(event.data);
    document.querySelector("#timeline-note").textContent = `${error.code}: ${error.message}`;
  });
}

/** Shows the ledger of `instance` (of context `on`, another machine's, when given), following it until another is shown. */
export function showTimeline(instance, on = undefined) {
  name = instance;
  context = on;
  follow();
}

kindSelect().addEventListener("change", () => name && follow());
