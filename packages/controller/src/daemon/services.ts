// Operations on a running guest: services with their previews, ad-hoc previews, the terminal.

import { LIMITS, hasPreview, referencedServices, type SandboxConfig, type ServiceConfig } from "@pi-sandbox/config";
import {
  adHocPreview,
  isLoopbackV4,
  type PreviewGateway,
  type PreviewInfo,
  type PreviewLink,
  type PreviewSpec,
} from "@pi-sandbox/ingress";
import { ControllerError } from "../errors.js";
import { isSupervisorError, type ServicesResult } from "@pi-sandbox/supervisor";
import { runInGuest, type GuestSshAccess } from "@pi-sandbox/vm";
import { readRecord, type PreviewLinkInfo } from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import type { GuestActions, ServicesView, WorkspaceBase } from "../actions/kit/context.js";
import { GUEST_SECRETS_PROFILE, resolveSecrets, secretsProfile } from "./secrets.js";
import { toControllerError, type InstanceState } from "./state.js";
import { GUEST_TLS_PROFILE, tlsProfileScript } from "./terminal-tls.js";
import { exportWorkspace, workspacePatch } from "./workspace-diff.js";

type Progress = (event: ProgressEvent) => void;

function linksOf(service: ServiceConfig): PreviewLink[] {
  const links: PreviewLink[] = [];
  if (service.preview) links.push({ ...service.preview });
  for (const entry of service.previews) {
    if (entry.kind === "link") {
      const { kind: _kind, ...link } = entry;
      links.push(link);
    } else for (const link of entry.links) links.push({ ...link, folder: entry.folder });
  }
  return links;
}

/** The named services and every service whose public URL their env refers to. */
function withReferences(config: SandboxConfig, names: readonly string[]): Set<string> {
  const touched = new Set(names);
  for (const name of names) {
    const service = Object.hasOwn(config.services, name) ? config.services[name] : undefined;
    for (const referenced of service ? referencedServices(service.env) : []) touched.add(referenced);
  }
  return touched;
}

/**
 * Refuses a new preview past LIMITS.previewsMax: each preview (open or reserved) is a host
 * listener, and the services that ask for them come from a guest file.
 */
function checkPreviewLimit(gateway: PreviewGateway, key: string): void {
  if (gateway.has(key) || gateway.size < LIMITS.previewsMax) return;
  throw new ControllerError(
    "CONTROLLER_PREVIEW_LIMIT",
    `${key} gets no preview: this instance already has ${LIMITS.previewsMax} previews, the most one instance may hold`,
    {
      hint: "Remove preview: from services that do not need one (in the guest .sandbox.yaml), then run services ensure.",
      details: { key, limit: LIMITS.previewsMax },
    },
  );
}

/** The origin of a preview whose service is about to start: reserved now, opened once its port is known. */
async function reserveLimited(gateway: PreviewGateway, key: string): Promise<string> {
  checkPreviewLimit(gateway, key);
  return (await gateway.reserve(key)).origin;
}

/** Opens (or updates) a preview whose guest port is known. */
async function openLimited(gateway: PreviewGateway, spec: PreviewSpec): Promise<PreviewInfo> {
  checkPreviewLimit(gateway, spec.key);
  return gateway.open(spec);
}

function previewInfoToLinks(info: PreviewInfo): PreviewLinkInfo[] {
  return info.links.map((l) => {
    const out: PreviewLinkInfo = { service: info.key, url: l.url, title: l.title };
    if (l.description !== undefined) out.description = l.description;
    if (l.folder !== undefined) out.folder = l.folder;
    return out;
  });
}

/** A recorded link as a preview spec's link: a path on the (same, leased) origin, or external. */
function toPreviewLink(info: PreviewLinkInfo): PreviewLink {
  const url = new URL(info.url);
  // The preview's own origin (127.0.0.1, or the instance's 127.x.y.z address) is a path on it.
  const local = isLoopbackV4(url.hostname) || url.hostname === "localhost";
  const link: PreviewLink = { url: local ? `${url.pathname}${url.search}${url.hash}` : info.url, title: info.title };
  if (info.description !== undefined) link.description = info.description;
  if (info.folder !== undefined) link.folder = info.folder;
  return link;
}

/** The previews recorded at the suspend that no declared service reopened: ad-hoc ones. */
function previewsToReopen(
  recorded: readonly PreviewLinkInfo[],
  open: ReadonlySet<string>,
): Map<string, PreviewLinkInfo[]> {
  const byKey = new Map<string, PreviewLinkInfo[]>();
  for (const link of recorded) {
    if (open.has(link.service)) continue;
    byKey.set(link.service, [...(byKey.get(link.service) ?? []), link]);
  }
  return byKey;
}

/** The guest operations of one instance. */
export class GuestOperations implements GuestActions {
  /** The links each declared service's preview was opened with in this run. */
  private readonly declaredLinks = new Map<string, PreviewLink[]>();
  /** The terminal accesses handed out (each closes itself, or with its VM). */
  private readonly terminals = new Set<GuestSshAccess>();

  constructor(private readonly state: InstanceState) {}

  supervisor() {
    return this.state.running().supervisor;
  }

  ensureServices(names?: readonly string[]): Promise<ServicesView> {
    return this.withPreviews(this.ensure(() => undefined, names, false));
  }

  restartServices(names?: readonly string[]): Promise<ServicesView> {
    return this.withPreviews(this.ensure(() => undefined, names, true));
  }

  stopServices(names?: readonly string[]): Promise<ServicesResult> {
    return this.state.running().supervisor.stopServices(names);
  }

  async serviceStatus(names?: readonly string[]) {
    const services = await this.state.running().supervisor.serviceStatus(names);
    return { services, previews: this.state.status.previews ?? [] };
  }

  /**
   * Services at boot: failures go to progress as well as to inspect's errors. `known` is the
   * config the host has just written as the guest copy (a create): it is not read back.
   */
  async ensureWithProgress(progress: Progress, known?: SandboxConfig): Promise<void> {
    await this.ensure(progress, undefined, false, known);
  }

  /**
   * The guest copy of the config, read once. An invalid one is recorded for inspect and thrown; a
   * missing one is thrown as it stands (SUPERVISOR_GUEST_CONFIG_NOT_FOUND, with its hint), or is
   * undefined with `missingOk` (a restart still reaches ad-hoc services).
   */
  private async readGuestConfig(missingOk: boolean): Promise<SandboxConfig | undefined> {
    try {
      return await this.state.running().supervisor.readGuestConfig();
    } catch (error) {
      if (isSupervisorError(error, "SUPERVISOR_GUEST_CONFIG_NOT_FOUND")) {
        if (missingOk) return undefined;
        throw error;
      }
      const e = toControllerError(error);
      this.state.recordError(
        e.code,
        `guest .sandbox.yaml: ${e.message}`,
        "Fix the guest file with write, then run services ensure.",
      );
      await this.state.setState(this.state.status.state).catch(() => undefined);
      throw error;
    }
  }

  /**
   * Ensures (or restarts) the services acted on (every one without names, else the named ones and
   * those whose public URL they refer to) with their previews. The guest YAML is read once (not
   * at all when `known` is given) and handed to the agent's client as parsed. A previewed
   * service's preview is reserved first (its origin is the service's PUBLIC_URL), then opened
   * once on the port the service got. Other services and their previews are left alone.
   */
  private async ensure(
    progress: Progress,
    names: readonly string[] | undefined,
    restart: boolean,
    known?: SandboxConfig,
  ): Promise<ServicesResult> {
    const { supervisor, gateway } = this.state.running();
    const config = known ?? (await this.readGuestConfig(restart));
    const touched = names && config ? withReferences(config, names) : undefined;
    const origins: Record<string, string> = {};
    const wanted = new Map<string, PreviewLink[]>();
    for (const name of config?.serviceOrder ?? []) {
      const service = config!.services[name]!;
      if (!hasPreview(service)) continue;
      const current = gateway.get(name);
      if (touched && !touched.has(name)) {
        if (current) origins[name] = current.origin;
        continue;
      }
      // A referenced service's preview that is already open only lends its origin.
      if (current && touched && !names!.includes(name)) {
        origins[name] = current.origin;
        continue;
      }
      // A restart keeps the links a preview already has; ensure takes up new preview configuration.
      const links = (restart && this.declaredLinks.get(name)) || linksOf(service);
      this.declaredLinks.set(name, links);
      try {
        origins[name] = await reserveLimited(gateway, name);
        wanted.set(name, links);
      } catch (error) {
        const e = toControllerError(error);
        this.state.recordError(e.code, e.message, e.hint);
        progress({ stage: "preview", message: `${name}: ${e.message}` });
      }
    }
    const options = { previewOrigins: origins, ...(config ? { config } : {}) };
    const result = restart
      ? await supervisor.restartServices(names, options)
      : await supervisor.ensureServices(names, options);
    // Each preview opens once, on its service's port. One whose service got none (not started)
    // stays reserved: its origin is held for the services that refer to it, and it opens when
    // the service starts.
    for (const status of result.services) {
      const links = wanted.get(status.name);
      const guestPort = status.port ?? gateway.get(status.name)?.guestPort;
      if (links && guestPort) await gateway.open({ key: status.name, guestPort, links });
    }
    for (const failure of result.failures) {
      this.state.recordError(
        failure.code,
        failure.message,
        failure.hint ??
          (failure.logPath
            ? `See {"action":"logs","name":"${this.state.name}","service":"${failure.service}"}.`
            : undefined),
      );
      progress({ stage: "services", message: failure.message });
    }
    await this.savePreviews();
    return result;
  }

  /**
   * After a warm start (ensure reopened the declared services' previews): reopens the other
   * previews of the suspended run, an ad-hoc port's or an ad-hoc service's, on their leased ports.
   * One that cannot be reopened is reported and left closed.
   */
  async reopenPreviews(recorded: readonly PreviewLinkInfo[], progress: Progress): Promise<void> {
    const { supervisor, gateway } = this.state.running();
    const missing = previewsToReopen(recorded, new Set(gateway.list().map((info) => info.key)));
    if (missing.size === 0) return;
    const services = await supervisor.serviceStatus();
    for (const [key, links] of missing) {
      const adHocPort = /^port-(\d+)$/.exec(key)?.[1];
      const guestPort = adHocPort
        ? Number(adHocPort)
        : services.find((s) => s.name === key && s.state === "running")?.port;
      if (!guestPort) continue;
      try {
        await openLimited(gateway, { key, guestPort, links: links.map(toPreviewLink) });
      } catch (error) {
        const e = toControllerError(error);
        this.state.recordError(e.code, e.message, e.hint);
        progress({ stage: "preview", message: `${key}: ${e.message}` });
      }
    }
    await this.savePreviews();
  }

  async startService(
    spec: Parameters<GuestActions["startService"]>[0],
    preview: Parameters<GuestActions["startService"]>[1],
  ) {
    const { supervisor, gateway } = this.state.running();
    // As for declared services: the origin is reserved first, the preview opened once on the port.
    const origin = preview ? await reserveLimited(gateway, spec.name) : undefined;
    const status = await supervisor.startService({ ...spec, ...(origin ? { publicUrl: origin } : {}) });
    if (preview && status.port) await gateway.open({ key: spec.name, guestPort: status.port, links: preview.links });
    await this.savePreviews();
    return { service: status, previews: (this.state.status.previews ?? []).filter((p) => p.service === spec.name) };
  }

  async openPreview(spec: { port: number; title?: string; description?: string }) {
    const info = await openLimited(this.state.running().gateway, adHocPreview(spec));
    await this.savePreviews();
    return { previews: previewInfoToLinks(info) };
  }

  async shell(user: string) {
    const { vm } = this.state.running();
    const access = await vm.enableSsh({ user });
    this.terminals.add(access);
    // ssh starts sessions with a fresh environment: their login shell reads the VM's CA variables
    // and the placeholders from /etc/profile.d instead (exec, services and hooks have them from
    // the VM itself). One exec writes both: its environment is the VM's.
    const record = await readRecord(this.state.layout, this.state.kind, this.state.name);
    const secrets =
      record?.secretSalt && Object.keys(record.config.network.secrets ?? {}).length > 0
        ? await secretsProfile(record.config, record.secretSalt, this.state.layout.root)
        : undefined;
    const script = secrets ? `${tlsProfileScript()}\ncat > ${GUEST_SECRETS_PROFILE}` : tlsProfileScript();
    const written = await runInGuest(vm, ["/bin/sh", "-c", script], secrets ? { stdin: secrets } : {});
    if (written.exitCode !== 0) {
      const files = secrets ? `${GUEST_TLS_PROFILE} and ${GUEST_SECRETS_PROFILE}` : GUEST_TLS_PROFILE;
      this.state.log.warn(`writing ${files} failed: exit ${written.exitCode}`);
    }
    return { command: access.command, user: access.user, port: access.port };
  }

  /** Terminal sessions open now, through the accesses `shell` handed out (auto-suspend waits for them). */
  terminalSessions(): number {
    let open = 0;
    for (const access of this.terminals) {
      if (access.closed) this.terminals.delete(access);
      else open += access.sessionCount;
    }
    return open;
  }

  async reloadSecrets() {
    const { vm } = this.state.running();
    const record = await readRecord(this.state.layout, this.state.kind, this.state.name);
    const secrets =
      record?.secretSalt !== undefined
        ? await resolveSecrets(record.config, { salt: record.secretSalt, stateRoot: this.state.layout.root })
        : {};
    for (const [name, secret] of Object.entries(secrets)) vm.updateSecret(name, secret.value, secret.placeholder);
    this.state.log.info(`secrets read again: ${Object.keys(secrets).join(", ") || "none"}`);
    return { secrets: Object.entries(secrets).map(([name, secret]) => ({ name, hosts: [...secret.hosts] })) };
  }

  workspacePatch(options: { base: WorkspaceBase; path?: string; maxBytes: number; signal?: AbortSignal }) {
    return workspacePatch(this.state, options);
  }

  exportWorkspace(to: string, options: { known?: string; signal?: AbortSignal }) {
    return exportWorkspace(this.state, to, options);
  }

  private async withPreviews<T extends object>(work: Promise<T>): Promise<T & { previews: PreviewLinkInfo[] }> {
    const result = await work;
    return { ...result, previews: this.state.status.previews ?? [] };
  }

  private async savePreviews(): Promise<void> {
    const gateway = this.state.gateway;
    if (gateway)
      await this.state.setState(this.state.status.state, { previews: gateway.list().flatMap(previewInfoToLinks) });
  }
}
