// The pi-sandbox dashboard page: renders the snapshot the server pushes (server-sent events), runs
// the page's actions, follows logs, and shows each instance's forks and kept checkpoints side by
// side, with diff stats asked for on demand, and the egress requests waiting for the user's answer.
// Other contexts' instances (machines reached over ssh) are listed under their context's name, with
// their preview links (forwarded here) and the same buttons as this machine's: each request names
// the context, and the dashboard runs it there as pi-sandbox --context NAME does.
// Every text from the server, a guest's preview titles, log lines and host names included, goes
// into the page as text (textContent, text nodes), never as HTML.

import { showTimeline } from "./timeline.js";

const $ = (selector) => document.querySelector(selector);

/** An element with attributes and children (strings become text nodes). */
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== undefined) node.append(child);
  return node;
}

function formatAge(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min`;
  if (seconds < 36 * 3600) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

function formatMiB(bytes) {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** A small line chart of `values` (newest last), described for screen readers by `label`. */
function sparkline(values, label) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const width = 80;
  const height = 18;
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  if (values.length > 1) {
    const max = Math.max(...values) || 1;
    const step = width / (values.length - 1);
    const points = values.map(
      (v, i) => `${(i * step).toFixed(1)},${(height - 1 - (v / max) * (height - 2)).toFixed(1)}`,
    );
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", points.join(" "));
    svg.append(line);
  }
  return svg;
}

/** Shows a coded error with its hint, as the CLI prints it. */
function showError(error, context) {
  const box = el(
    "div",
    { class: "error" },
    el(
      "p",
      {},
      context ? `${context}: ` : "",
      el("span", { class: "code", text: error.code ?? "ERROR" }),
      ` ${error.message ?? ""}`,
    ),
  );
  if (error.hint) box.append(el("p", { text: `hint: ${error.hint}` }));
  box.append(el("button", { type: "button", text: "Dismiss", onclick: () => box.remove() }));
  $("#errors").append(box);
}

/** Calls one of the page's actions; refreshes come with the next pushed snapshot. */
async function act(body, button) {
  if (button) button.disabled = true;
  try {
    const response = await fetch("/api/action", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response
      .json()
      .catch(() => ({ error: { code: `HTTP_${response.status}`, message: response.statusText } }));
    const where = body.context ? ` on ${body.context}` : "";
    if (answer.error) showError(answer.error, `${body.op} ${body.name}${where}`);
    return answer;
  } catch (error) {
    showError(
      {
        code: "DASHBOARD_UNREACHABLE",
        message: String(error),
        hint: "Is the dashboard still running? Run pi-sandbox dashboard.",
      },
      `${body.op} ${body.name}`,
    );
  } finally {
    if (button) button.disabled = false;
  }
}

const ACTIVE = new Set(["starting", "running", "stopping", "suspending"]);

/** A button; `subject` (an instance or service name) completes its accessible name: "Stop web". */
function button(label, key, onclick, extra = {}, subject = undefined) {
  const name = subject === undefined ? undefined : `${label.replace(/…$/, "")} ${subject}`;
  return el("button", { type: "button", "data-key": key, text: label, "aria-label": name, onclick, ...extra });
}

function previewList(previews) {
  if (!previews.length) return el("span", { class: "muted", text: "—" });
  const list = el("ul");
  for (const preview of previews) {
    let safe = false;
    try {
      safe = ["http:", "https:"].includes(new URL(preview.url).protocol);
    } catch {
      safe = false;
    }
    const title = preview.folder ? `${preview.folder} / ${preview.title}` : preview.title;
    const link = safe
      ? el("a", { href: preview.url, target: "_blank", rel: "noopener noreferrer", text: title, title: preview.url })
      : el("span", { text: `${title} (${preview.url})` });
    const item = el("li", {}, link);
    if (preview.description) item.append(el("span", { class: "description", text: preview.description }));
    list.append(item);
  }
  return list;
}

function stateCell(view) {
  const cell = el("td", {}, el("span", { class: `state state-${view.state}`, text: view.state }));
  const note = (text) => cell.append(el("div", { class: "muted", text }));
  // The last start: how long it took, how long a warm resume took, or why it booted cold; a failed setup.
  if (view.lastStart) {
    const how = view.lastStart.warm ? "resumed" : "booted";
    note(`last start ${(view.lastStart.ms / 1000).toFixed(1)} s (${how})`);
  }
  if (view.restore?.warm) note(`resumed from memory in ${(view.restore.restoreMs / 1000).toFixed(1)} s`);
  else if (view.restore) note(`booted cold: ${view.restore.reason}`);
  if (view.setup && view.setup.exitCode !== 0) {
    note(`setup failed (${view.setup.timedOut ? "timed out" : `exit ${view.setup.exitCode}`})`);
  }
  for (const error of view.errors ?? []) note(`${error.code}: ${error.message}`);
  if (view.hint) note(view.hint);
  return cell;
}

function usageCells(view, history) {
  const samples = history[view.name] ?? [];
  if (!view.usage) return [el("td", { class: "muted", text: "—" }), el("td", { class: "muted", text: "—" })];
  const cpu = samples.map((s) => s.cpu);
  const rss = samples.map((s) => s.rss);
  const minutes = samples.length ? Math.max(1, Math.round((Date.now() - samples[0].t) / 60000)) : 0;
  return [
    el(
      "td",
      { class: "cpu" },
      `${view.usage.cpuPercent.toFixed(1)} %`,
      sparkline(
        cpu,
        `CPU over the last ${minutes} min: now ${view.usage.cpuPercent.toFixed(1)} %, peak ${Math.max(0, ...cpu).toFixed(1)} %`,
      ),
    ),
    el(
      "td",
      { class: "rss" },
      formatMiB(view.usage.rssBytes),
      sparkline(
        rss,
        `Memory over the last ${minutes} min: now ${formatMiB(view.usage.rssBytes)}, peak ${formatMiB(Math.max(0, ...rss))}`,
      ),
    ),
  ];
}

function destroyButton(view, kind, context = undefined) {
  return button(
    "Destroy…",
    context ? `destroy:${kind}:${view.name}@${context}` : `destroy:${kind}:${view.name}`,
    () => askDestroy(view.name, kind, context),
    { class: "danger" },
    context ? `${view.name} on ${context}` : view.name,
  );
}

/**
 * An instance's Start or Stop and Suspend, Details and Destroy… buttons; with `context`, each
 * request names that machine (its keys and accessible names too: "Stop demo on big").
 */
function instanceActions(view, context = undefined) {
  const actions = el("td", { class: "actions" });
  const name = view.name;
  const at = context ? `@${context}` : "";
  const subject = context ? `${name} on ${context}` : name;
  const request = (op) => (context ? { op, name, context } : { op, name });
  const lifecycle = (label, op) =>
    button(label, `${op}:${name}${at}`, (e) => act(request(op), e.currentTarget), {}, subject);
  if (ACTIVE.has(view.state) || view.state === "unavailable") {
    actions.append(lifecycle("Stop", "stop"), lifecycle("Suspend", "suspend"));
  } else {
    actions.append(lifecycle("Start", "start"));
  }
  actions.append(button("Details", `detail:${name}${at}`, () => openDetail(name, context), {}, `of ${subject}`));
  actions.append(destroyButton(view, "instances", context));
  return actions;
}

/** The name cell: a fork is indented under its source and says which it is. */
function nameCell(view, depth, branches) {
  const cell = el("th", { scope: "row", class: depth > 0 ? `fork depth-${Math.min(depth, 4)}` : undefined });
  cell.append(el("span", { class: "name", text: view.name }));
  const source = branches?.forkedFrom;
  if (source) {
    const note = `fork of ${source.name}${source.gone ? " (destroyed)" : ""}`;
    cell.append(el("div", { class: "muted forked-from", text: note, title: source.at }));
  }
  return cell;
}

function instanceRow(view, history, depth = 0, branches = undefined) {
  const name = view.name;
  const actions = instanceActions(view);
  const accelerator = view.accelerator
    ? el("span", { text: view.accelerator, title: view.acceleratorReason ?? "" })
    : "—";
  const resources = `${view.resources.cpus} cpu, ${view.resources.memoryGiB} GiB, ${view.diskGiB} GiB disk`;
  return el(
    "tr",
    { "data-name": name },
    nameCell(view, depth, branches),
    stateCell(view),
    el("td", {}, accelerator),
    el("td", { text: resources }),
    el("td", { text: formatAge(view.createdAt), title: view.createdAt }),
    ...usageCells(view, history),
    el("td", { class: "previews" }, previewList(view.previews ?? [])),
    actions,
  );
}

// Forks and kept checkpoints. Each instance with any has a group under its row, side by side: its
// checkpoints (kind, time, size, pinned) and its forks (recursively, each with its state and
// preview links). A diff stat runs in the guest, so it is asked for with a button, never polled.
const openGroups = new Set();
const openFileLists = new Set();
const diffResults = new Map();

/**
 * A `<details>` that stays open or closed across the page's refreshes (each rebuilds it): its state
 * is kept in `remembered` under `key`, at the click (a refresh may come before the toggle event).
 */
function keptDetails(remembered, key, summary, ...children) {
  const details = el("details", { open: remembered.has(key) }, el("summary", summary), ...children);
  const remember = (open) => (open ? remembered.add(key) : remembered.delete(key));
  details.querySelector("summary").addEventListener("click", () => remember(!details.open));
  details.addEventListener("toggle", () => remember(details.open));
  return details;
}

function formatBytes(bytes) {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : formatMiB(bytes);
}

/** The order of the instance rows: each fork right after its source (depth first), then the rest. */
function familyOrder(instances, branches) {
  const byName = new Map(instances.map((view) => [view.name, view]));
  const rows = [];
  const seen = new Set();
  const visit = (view, depth) => {
    if (seen.has(view.name)) return;
    seen.add(view.name);
    rows.push({ view, depth });
    for (const fork of branches[view.name]?.forks ?? []) {
      const child = byName.get(fork.name);
      if (child) visit(child, depth + 1);
    }
  };
  for (const view of instances) {
    const source = branches[view.name]?.forkedFrom;
    if (!source || !byName.has(source.name)) visit(view, 0);
  }
  for (const view of instances) visit(view, 0);
  return rows;
}

async function askDiff(key, request) {
  diffResults.set(key, { running: true });
  if (latest) render(latest);
  let answer;
  try {
    const response = await fetch("/api/diff", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(request),
    });
    answer = await response
      .json()
      .catch(() => ({ error: { code: `HTTP_${response.status}`, message: response.statusText } }));
  } catch (error) {
    answer = { error: { code: "DASHBOARD_UNREACHABLE", message: String(error) } };
  }
  diffResults.set(key, answer.error ? { error: answer.error } : { stat: answer.stat });
  if (latest) render(latest);
}

/** A diff stat's cell: the stat once asked for, a button to ask, or why it cannot be asked now. */
function diffCell(tag, key, request, unavailable, subject, prefix = undefined) {
  const cell = el(tag, { class: "diffstat", "data-diff": key });
  if (prefix) cell.append(el("span", { class: "muted", text: `${prefix} ` }));
  const shown = diffResults.get(key);
  if (shown?.stat) {
    const { files, added, deleted, changed, at } = shown.stat;
    const summary = files === 0 ? "no changes" : `${files} file${files === 1 ? "" : "s"}, +${added} −${deleted}`;
    cell.append(el("span", { class: "stat", text: summary, title: `asked at ${new Date(at).toLocaleTimeString()}` }));
    if (changed.length > 0) {
      const list = el("ul", { class: "changed" });
      for (const f of changed) {
        const path = f.oldPath !== undefined ? `${f.oldPath} → ${f.path}` : f.path;
        const counts = f.binary ? "binary" : `+${f.added} −${f.deleted}`;
        list.append(el("li", { text: `${f.status} ${path} ${counts}` }));
      }
      cell.append(keptDetails(openFileLists, key, { text: "files", "data-key": `files:${key}` }, list));
    }
  } else if (shown?.error) {
    cell.append(el("span", { class: "diff-error", text: `${shown.error.code}: ${shown.error.message}` }));
  }
  if (unavailable) {
    if (!shown) cell.append(el("span", { class: "muted", text: unavailable }));
    return cell;
  }
  const label = shown?.running ? "Diff stat…" : shown ? "Again" : "Diff stat";
  cell.append(
    button(label, `diff:${key}`, () => void askDiff(key, request), { disabled: shown?.running === true }, subject),
  );
  return cell;
}

function checkpointTable(view, branches, diff) {
  const running = view.state === "running";
  const head = ["Checkpoint", "Kind", "Taken", "Size", ...(diff ? ["Changes since"] : [])];
  const table = el(
    "table",
    { class: "checkpoints" },
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))),
  );
  const body = el("tbody");
  for (const c of branches.checkpoints) {
    const name = el("th", { scope: "row" }, el("span", { class: "label", text: c.label ?? c.id }));
    if (c.label !== undefined) name.append(el("div", { class: "muted id", text: c.id }));
    const kind = `${c.kind}${c.pinned ? ", pinned" : ""}`;
    body.append(
      el(
        "tr",
        { "data-checkpoint": c.id },
        name,
        el("td", { class: "kind", text: kind }),
        el("td", { text: `${formatAge(c.createdAt)} ago`, title: c.createdAt }),
        el("td", { text: formatBytes(c.bytes) }),
        diff
          ? diffCell(
              "td",
              `${view.name}|since|${c.id}`,
              { name: view.name, since: c.id },
              running ? undefined : "while it runs",
              `of ${view.name} since ${c.label ?? c.id}`,
            )
          : undefined,
      ),
    );
  }
  table.append(body);
  return el(
    "section",
    { class: "checkpoint-list" },
    el("h3", {
      text: `Checkpoints (${branches.checkpoints.length}, ${formatBytes(branches.checkpointBytes)} beyond its disk)`,
    }),
    branches.checkpoints.length > 0 ? table : el("p", { class: "muted", text: "None kept." }),
  );
}

function forkList(source, forks, byName, diff) {
  const list = el("ul", { class: "fork-tree" });
  for (const fork of forks) {
    const view = byName.get(fork.name);
    const item = el(
      "li",
      { "data-fork": fork.name },
      el("span", { class: "name", text: fork.name }),
      " ",
      view ? el("span", { class: `state state-${view.state}`, text: view.state }) : undefined,
      el("span", { class: "muted", text: ` forked ${formatAge(fork.at)} ago`, title: fork.at }),
    );
    item.append(el("div", { class: "previews" }, previewList(view?.previews ?? [])));
    if (diff) {
      const bothRun = view?.state === "running" && byName.get(source)?.state === "running";
      item.append(
        diffCell(
          "div",
          `${fork.name}|against|${source}`,
          { name: fork.name, against: source },
          bothRun ? undefined : "diff stat while both run",
          `of ${fork.name} against ${source}`,
          `changes against ${source}:`,
        ),
      );
    }
    if (fork.forks.length > 0) item.append(forkList(fork.name, fork.forks, byName, diff));
    list.append(item);
  }
  return list;
}

/** The group under an instance's row, or nothing when it has neither forks nor checkpoints. */
function branchesRow(view, snapshot) {
  const branches = snapshot.branches?.[view.name];
  if (!branches || (branches.forks.length === 0 && branches.checkpoints.length === 0)) return undefined;
  const byName = new Map(snapshot.instances.map((v) => [v.name, v]));
  const count = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const details = keptDetails(
    openGroups,
    view.name,
    {
      "data-key": `branches:${view.name}`,
      text: `Forks and checkpoints of ${view.name}: ${count(branches.forks.length, "fork")}, ${count(branches.checkpoints.length, "checkpoint")}`,
    },
    el(
      "div",
      { class: "side-by-side" },
      checkpointTable(view, branches, snapshot.diff === true),
      el(
        "section",
        { class: "fork-list" },
        el("h3", { text: `Forks (${branches.forks.length})` }),
        branches.forks.length > 0
          ? forkList(view.name, branches.forks, byName, snapshot.diff === true)
          : el("p", { class: "muted", text: "None." }),
      ),
    ),
  );
  return el("tr", { class: "branches", "data-branches-of": view.name }, el("td", { colspan: 9 }, details));
}

function templateRow(view) {
  const resources = `${view.resources.cpus} cpu, ${view.resources.memoryGiB} GiB, ${view.diskGiB} GiB disk`;
  return el(
    "tr",
    { "data-name": view.name },
    el("th", { scope: "row", text: view.name }),
    stateCell(view),
    el("td", { text: resources }),
    el("td", { text: formatAge(view.createdAt), title: view.createdAt }),
    el("td", { class: "actions" }, destroyButton(view, "templates")),
  );
}

/** Replaces a table's rows, keeping keyboard focus on the same button if it is still there. */
function replaceRows(tbody, rows) {
  const focused = document.activeElement?.getAttribute?.("data-key");
  tbody.replaceChildren(...rows);
  if (focused) tbody.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus();
}

/** The choices for one waiting host, as Pi's select offers them. */
const EGRESS_CHOICES = [
  ["Allow once", "egress-once"],
  ["Allow for this instance", "egress-instance"],
  ["Deny", "egress-deny"],
];

/** One waiting egress request: what the guest asked for, and the user's three answers (there, for another context's). */
function egressItem(name, ask, context = undefined) {
  const who = context ? `${name} on ${context}` : name;
  const what = `${who} wants to reach ${ask.host}:${ask.port} (${ask.protocol.toUpperCase()} ${ask.method})`;
  const more = ask.waiting > 1 ? `, ${ask.waiting} requests` : "";
  const until = ` — refused at ${new Date(ask.until).toLocaleTimeString()} without an answer`;
  const item = el("li", { class: "egress-ask" }, el("span", { text: `${what}${more}${until}` }));
  for (const [label, op] of EGRESS_CHOICES) {
    item.append(
      " ",
      button(
        label,
        `${op} ${name}${context ? `@${context}` : ""} ${ask.host}`,
        (event) => act({ op, name, host: ask.host, ...(context ? { context } : {}) }, event.currentTarget),
        { class: op === "egress-deny" ? "danger" : undefined, "aria-label": `${label}: ${who} to ${ask.host}` },
      ),
    );
  }
  return item;
}

function renderEgress(egress, contexts) {
  const items = Object.entries(egress ?? {}).flatMap(([name, asks]) => asks.map((ask) => egressItem(name, ask)));
  for (const { context, egress: waiting } of contexts) {
    for (const [name, asks] of Object.entries(waiting ?? {}))
      items.push(...asks.map((a) => egressItem(name, a, context)));
  }
  replaceRows($("#egress-asks"), items);
  $("#egress").hidden = items.length === 0;
}

/** Another context's instance: what it is, its previews (forwarded here) and its buttons, run there. */
function contextRow(view) {
  const resources = `${view.resources.cpus} cpu, ${view.resources.memoryGiB} GiB, ${view.diskGiB} GiB disk`;
  return el(
    "tr",
    { "data-name": view.name, "data-context": view.context },
    el("th", { scope: "row" }, el("span", { class: "name", text: view.name })),
    stateCell(view),
    el("td", { text: resources }),
    el("td", { text: formatAge(view.createdAt), title: view.createdAt }),
    el("td", { class: "previews" }, previewList(view.previews ?? [])),
    instanceActions(view, view.context),
  );
}

/** Each other context: a heading with its name and URL, then its instances or why it could not be listed. */
function renderContexts(contexts) {
  const groups = contexts.map(({ context, url, instances, error }) => {
    const group = el("div", { class: "context", id: `context-${context}`, "data-context": context });
    group.append(el("h3", { text: `${context} (${url})` }));
    if (error) {
      group.append(
        el("p", { class: "context-error", text: `Could not list context ${context}: ${error.code}: ${error.message}` }),
      );
      if (error.hint) group.append(el("p", { class: "muted", text: error.hint }));
      return group;
    }
    if (instances.length === 0) {
      group.append(el("p", { class: "muted", text: `No instances on ${context}.` }));
      return group;
    }
    const head = el(
      "tr",
      {},
      ...["Name", "State", "Resources", "Age", "Previews", "Actions"].map((h) => el("th", { scope: "col", text: h })),
    );
    group.append(el("table", {}, el("thead", {}, head), el("tbody", {}, ...instances.map(contextRow))));
    return group;
  });
  replaceRows($("#context-list"), groups);
  $("#contexts").hidden = contexts.length === 0;
  focusContext();
  $("#instances-title").textContent = contexts.length === 0 ? "Instances" : "Instances on this machine (local)";
}

// `pi-sandbox dashboard --context NAME` opens the page at #context-NAME: that machine's group is
// scrolled to once it is listed (it comes after the first snapshot, when its ssh answers).
let focusPending = location.hash.startsWith("#context-");
function focusContext() {
  if (!focusPending) return;
  const group = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (!group) return;
  focusPending = false;
  group.scrollIntoView();
}

let latest;
function render(snapshot) {
  latest = snapshot;
  renderEgress(snapshot.egress, snapshot.contexts ?? []);
  renderContexts(snapshot.contexts ?? []);
  const branches = snapshot.branches ?? {};
  replaceRows(
    $("#instances tbody"),
    familyOrder(snapshot.instances, branches).flatMap(({ view, depth }) => {
      const group = branchesRow(view, snapshot);
      const row = instanceRow(view, snapshot.history ?? {}, depth, branches[view.name]);
      return group ? [row, group] : [row];
    }),
  );
  replaceRows(
    $("#templates tbody"),
    snapshot.templates.map((view) => templateRow(view)),
  );
  $("#instances-empty").hidden = snapshot.instances.length > 0;
  $("#templates-empty").hidden = snapshot.templates.length > 0;
  $("#instances").hidden = snapshot.instances.length === 0;
  $("#templates").hidden = snapshot.templates.length === 0;
  $("#updated").textContent = snapshot.error
    ? `Could not refresh: ${snapshot.error.code}: ${snapshot.error.message}`
    : `Updated ${new Date(snapshot.at).toLocaleTimeString()}`;
}

// Destroy asks for the name, as the CLI's confirm does.
let destroying;
function askDestroy(name, kind, context = undefined) {
  destroying = { name, kind, context };
  $("#destroy-name").textContent = name;
  $("#destroy-where").textContent = context ? ` on ${context} (another machine)` : "";
  $("#destroy-confirm").value = "";
  $("#destroy-ok").disabled = true;
  $("#destroy-dialog").showModal();
  $("#destroy-confirm").focus();
}
$("#destroy-confirm").addEventListener("input", (event) => {
  $("#destroy-ok").disabled = event.currentTarget.value !== destroying?.name;
});
$("#destroy-dialog").addEventListener("close", () => {
  if ($("#destroy-dialog").returnValue !== "ok" || !destroying) return;
  const { name, kind, context } = destroying;
  void act({ op: "destroy", name, kind, confirm: $("#destroy-confirm").value, ...(context ? { context } : {}) });
});

// Services and logs of one instance.
let logSource;
let detailName;
let detailContext;
async function openDetail(name, context = undefined) {
  detailName = name;
  detailContext = context;
  const at = context ? `@${context}` : "";
  $("#detail").hidden = false;
  $("#detail-title").textContent = `${name}${context ? ` on ${context}` : ""}: services, logs and ledger`;
  const select = $("#log-select");
  select.replaceChildren(el("option", { value: "", text: "controller log" }));
  $("#services tbody").replaceChildren();
  $("#services-note").textContent = "";
  followLog(name, "");
  showTimeline(name, context);
  $("#detail").scrollIntoView();
  $("#detail-title").setAttribute("tabindex", "-1");
  $("#detail-title").focus();
  const query = new URLSearchParams({ name, ...(context ? { context } : {}) });
  const response = await fetch(`/api/services?${query}`);
  const answer = await response.json();
  if (answer.error) {
    $("#services-note").textContent = `${answer.error.code}: ${answer.error.message}`;
    return;
  }
  for (const service of answer.services ?? []) {
    select.append(el("option", { value: service.name, text: `service ${service.name}` }));
    const restart = button(
      "Restart",
      `restart:${name}${at}:${service.name}`,
      (e) =>
        act({ op: "restart-service", name, service: service.name, ...(context ? { context } : {}) }, e.currentTarget),
      {},
      `service ${service.name}`,
    );
    const showLog = button(
      "Log",
      `log:${name}${at}:${service.name}`,
      () => {
        select.value = service.name;
        followLog(name, service.name);
      },
      {},
      `of service ${service.name}`,
    );
    $("#services tbody").append(
      el(
        "tr",
        { "data-service": service.name },
        el("th", { scope: "row", text: service.name }),
        el("td", { text: service.state ?? "" }),
        el("td", { text: service.port ?? "—" }),
        el("td", { text: service.restarts ?? 0 }),
        el("td", {}, restart, showLog),
      ),
    );
  }
}
$("#log-select").addEventListener("change", (event) => followLog(detailName, event.currentTarget.value));

const MAX_LOG_LINES = 2000;
function followLog(name, service) {
  logSource?.close();
  const log = $("#log");
  log.replaceChildren();
  const query = new URLSearchParams({ name });
  if (service) query.set("service", service);
  if (detailContext) query.set("context", detailContext);
  logSource = new EventSource(`/api/logs?${query}`);
  logSource.addEventListener("lines", (event) => {
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    for (const line of JSON.parse(event.data).lines) log.append(document.createTextNode(`${line}\n`));
    while (log.childNodes.length > MAX_LOG_LINES) log.firstChild.remove();
    if (atEnd) log.scrollTop = log.scrollHeight;
  });
  logSource.addEventListener("failure", (event) => {
    if (!event.data) return;
    const { error } = JSON.parse(event.data);
    log.append(document.createTextNode(`[${error.code}: ${error.message}]\n`));
  });
}

// Live state: the server pushes a snapshot after each poll.
const events = new EventSource("/api/events");
events.addEventListener("state", (event) => render(JSON.parse(event.data)));
events.addEventListener("error", () => {
  if (events.readyState === EventSource.CLOSED)
    $("#updated").textContent = "Disconnected: is the dashboard still running?";
});
setInterval(() => latest && render(latest), 30_000);
