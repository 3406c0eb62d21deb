"""The service table: ensure, restart, stop, status, ad-hoc start and log tails."""

from __future__ import annotations

import collections
import os
import threading
from typing import Any

from .context import Context
from .logs import RotatingLog, tail_log
from .procs import mono
from .protocol import AgentError, JsonDict, check_str, need_int
from .service import SERVICE_STOP_GRACE_S, Service, check_service_spec
from .state import PortBook

# A service just launched, with its readiness deadline (monotonic s) and its timeout in ms.
Started = tuple[Service, float, int]


class Services:
    """The service table.

    `_op` serialises whole mutations (ensure/restart/stop/start), including the bounded wait for a
    stopped process, so two of them can never both launch the same name. `_lock` guards only the
    table itself, so status never waits behind a slow stop. Readiness waits hold neither.
    """

    def __init__(self, ctx: Context, ports: PortBook):
        self.ctx = ctx
        self.ports = ports
        self._op = threading.Lock()
        self._lock = threading.Lock()
        self._items: collections.OrderedDict[str, Service] = collections.OrderedDict()
        self._logs: dict[str, RotatingLog] = {}

    # -- ops

    def op_ensure(self, args: JsonDict) -> JsonDict:
        return self.ensure(specs_arg(args), wait=args.get("wait", True) is not False, only=names_arg(args, "only"))

    def op_restart(self, args: JsonDict) -> JsonDict:
        return self.restart(specs_arg(args))

    def op_stop(self, args: JsonDict) -> JsonDict:
        return self.stop(names_arg(args))

    def op_status(self, args: JsonDict) -> JsonDict:
        return self.status(names_arg(args))

    def op_start(self, args: JsonDict) -> JsonDict:
        spec = args.get("service")
        if not isinstance(spec, dict):
            raise AgentError("INVALID_ARGUMENT", "service must be a service spec")
        return self.start_adhoc(spec)

    def op_logs(self, args: JsonDict) -> JsonDict:
        limits = self.ctx.limits
        name = check_str(args, "service")
        lines = need_int(args, "lines", limits.log_lines_default, 1, limits.log_lines_max)
        if not self.known(name):
            raise AgentError("SERVICE_NOT_FOUND", "no service named %s has run in this guest" % name, {"service": name})
        path = self.log_path(name)
        text, omitted, count = tail_log(path, lines, limits.output_max_bytes)
        return {"service": name, "text": text, "lines": count, "truncatedBytes": omitted, "logPath": path}

    # -- the table

    def _log_for(self, name: str) -> RotatingLog:
        log = self._logs.get(name)
        if log is None:
            log = RotatingLog(self.log_path(name))
            self._logs[name] = log
        return log

    def log_path(self, name: str) -> str:
        return os.path.join(self.ctx.state.logs_dir, name + ".log")

    def _get(self, name: Any) -> Service | None:
        with self._lock:
            return self._items.get(name)

    def _check(self, raw: Any) -> JsonDict:
        return check_service_spec(raw, self.ctx.limits.readiness_default_ms)

    def _launch(self, spec: JsonDict, specs: list[JsonDict], keep_port: int | None = None) -> Started:
        with self._lock:
            reserved = {s["port"] for s in specs if s.get("port")}
            reserved |= {svc.port for svc in self._items.values() if svc.name != spec["name"]}
        port = spec["port"] or keep_port or self.ports.assign(spec["name"], reserved)
        svc = Service(self.ctx, spec, port, self._log_for(spec["name"]))
        with self._lock:
            self._items[spec["name"]] = svc
        svc.start()
        return svc, mono() + spec["timeoutMs"] / 1000.0, spec["timeoutMs"]

    def _wait_all(self, started: list[Started]) -> list[JsonDict]:
        failures = []
        for svc, deadline, timeout_ms in started:
            if not svc.wait_ready(deadline) and not svc.stop_requested:
                failures.append(svc.not_ready_failure(timeout_ms))
        return failures

    def ensure(self, raw_specs: list[Any], wait: bool = True, only: list[str] | None = None) -> JsonDict:
        """Starts the specs' services that are not running; with `only`, just those names.

        The other specs still count: a port picked for one service avoids their fixed ports.
        """
        specs = [self._check(s) for s in raw_specs]
        if only is not None:
            unknown = set(only) - {s["name"] for s in specs}
            if unknown:
                raise AgentError(
                    "INVALID_ARGUMENT", "only names services not in services: %s" % ", ".join(sorted(unknown))
                )
        started: list[Started] = []
        kept = []
        with self._op:
            for spec in specs:
                if only is not None and spec["name"] not in only:
                    continue
                current = self._get(spec["name"])
                if current is not None and current.live:
                    kept.append(spec["name"])
                    continue
                started.append(self._launch(spec, specs))
        failures = self._wait_all(started) if wait else []
        return {
            "started": [s.name for s, _, _ in started],
            "kept": kept,
            "failures": failures,
            "services": self.status(None)["services"],
        }

    def restart(self, raw: list[Any]) -> JsonDict:
        started: list[Started] = []
        with self._op:
            specs = []
            for item in raw:
                if isinstance(item, dict) and set(item.keys()) <= {"name"}:
                    current = self._get(item.get("name"))
                    if current is None:
                        raise AgentError(
                            "SERVICE_NOT_FOUND",
                            "no service named %s is known to the agent" % item.get("name"),
                            {"service": item.get("name")},
                        )
                    specs.append(dict(current.spec))
                else:
                    specs.append(self._check(item))
            for spec in specs:
                current = self._get(spec["name"])
                keep = None
                if current is not None:
                    current.stop()
                    keep = current.port
                started.append(self._launch(spec, specs, keep_port=keep))
        failures = self._wait_all(started)
        return {
            "restarted": [s.name for s, _, _ in started],
            "failures": failures,
            "services": self.status(None)["services"],
        }

    def start_adhoc(self, raw: JsonDict) -> JsonDict:
        spec = self._check(dict(raw, adhoc=True))
        spec["timeoutMs"] = min(spec["timeoutMs"], self.ctx.limits.adhoc_readiness_ms)
        with self._op:
            current = self._get(spec["name"])
            if current is not None:
                if not current.spec.get("adhoc"):
                    raise AgentError(
                        "SERVICE_DECLARED",
                        "service %s is declared in the sandbox.yaml; use restart instead" % spec["name"],
                        {"service": spec["name"]},
                    )
                current.stop()
            started = self._launch(spec, [spec], keep_port=current.port if current and not spec["port"] else None)
        failures = self._wait_all([started])
        return {"service": started[0].status(), "failures": failures}

    def stop(self, names: list[str] | None) -> JsonDict:
        with self._op:
            with self._lock:
                if names is None:
                    targets = list(self._items.values())
                    unknown: list[str] = []
                else:
                    targets = [self._items[n] for n in names if n in self._items]
                    unknown = [n for n in names if n not in self._items]
            threads = [threading.Thread(target=svc.stop, daemon=True) for svc in targets]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=SERVICE_STOP_GRACE_S + 5.0)
        return {"stopped": [s.name for s in targets], "unknown": unknown, "services": self.status(None)["services"]}

    def status(self, names: list[str] | None) -> JsonDict:
        with self._lock:
            items = list(self._items.values())
        if names is not None:
            wanted = set(names)
            items = [s for s in items if s.name in wanted]
        return {"services": [s.status() for s in items]}

    def known(self, name: str) -> bool:
        return self._get(name) is not None or os.path.exists(self.log_path(name))

    def shutdown(self) -> None:
        self.stop(None)
        for log in self._logs.values():
            log.close()


def specs_arg(args: JsonDict) -> list[Any]:
    specs = args.get("services")
    if not isinstance(specs, list):
        raise AgentError("INVALID_ARGUMENT", "services must be a list of service specs")
    return specs


def names_arg(args: JsonDict, key: str = "names") -> list[str] | None:
    names = args.get(key)
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise AgentError("INVALID_ARGUMENT", "%s must be a list of service names" % key)
    return names
