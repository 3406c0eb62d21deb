"""One supervised service: its process loop, restart delay, readiness probe and status."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from typing import Any, Optional

from .cleanup import RUN_MARKER_ENV
from .context import Context
from .logs import RotatingLog
from .procs import exit_info, group_alive, mono, now_iso, stop_group
from .protocol import AgentError, JsonDict, check_env, check_int, check_str, need_int

SERVICE_STOP_GRACE_S = 5.0
PROBE_INTERVAL_S = 0.1
HEALTH_KINDS = ("tcp", "http", "process")
SERVICE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")

Probe = tuple[bool, Optional[str]]


class Service:
    """One supervised service: a process in its own session, restarted after any exit."""

    def __init__(self, ctx: Context, spec: JsonDict, port: int, log: RotatingLog):
        self.ctx = ctx
        self.spec = spec
        self.name: str = spec["name"]
        self.port = port
        self.log = log
        self.restart_delay_s = ctx.limits.service_restart_delay_ms / 1000.0
        self.cond = threading.Condition()
        self.state = "running"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.restarts = 0
        self.last_exit: JsonDict | None = None
        self.readiness = "pending"
        self.readiness_error: str | None = None
        self.ready_at: str | None = None
        self.started_at: str | None = None
        self.spawns = 0
        self.stop_requested = False
        self.thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="svc-" + self.name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            while True:
                self._run_once()
                with self.cond:
                    if self.stop_requested:
                        break
                    self.state = "restarting"
                    self.cond.notify_all()
                    deadline = mono() + self.restart_delay_s
                    while not self.stop_requested and mono() < deadline:
                        self.cond.wait(deadline - mono())
                    if self.stop_requested:
                        break
                    self.restarts += 1
        except Exception:  # never let one service's bug take the agent down
            import traceback  # only here, as in agent.py

            self.log.note("supervisor error: %s" % traceback.format_exc().strip())
        finally:
            with self.cond:
                self.state = "stopped"
                self.proc = None
                self.pid = None
                self.cond.notify_all()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(RUN_MARKER_ENV, None)
        env.update(self.spec.get("env") or {})
        env["PORT"] = str(self.port)
        if self.spec.get("publicUrl"):
            env["PUBLIC_URL"] = self.spec["publicUrl"]
        else:
            env.pop("PUBLIC_URL", None)
        return env

    def _run_once(self) -> None:
        cwd = self.ctx.resolve_cwd(self.spec.get("cwd"))
        argv = self.ctx.login_shell(self.spec["command"])
        failure = ""
        with self.cond:
            if self.stop_requested:
                return
            self.spawns += 1
            generation = self.spawns
            self.readiness = "pending"
            self.readiness_error = None
            self.ready_at = None
            proc: subprocess.Popen[bytes] | None
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=self._env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as err:
                proc = None
                failure = "cwd %s does not exist" % cwd if not os.path.isdir(cwd) else str(err)
                self.last_exit = {"exitCode": 127, "at": now_iso(), "error": failure}
                self.readiness_error = "could not start: %s" % failure
            if proc is not None:
                self.proc = proc
                self.pid = proc.pid
                self.state = "running"
                self.started_at = now_iso()
            self.cond.notify_all()
        if proc is None:
            self.log.note("could not start: %s; retrying in %.0f s" % (failure, self.restart_delay_s))
            self.ctx.wire.event("service", {"service": self.name, "type": "exit", "exitCode": 127})
            return
        self.log.note(
            "started pid %d on port %d%s: %s"
            % (proc.pid, self.port, " (restart %d)" % self.restarts if self.restarts else "", self.spec["command"])
        )
        self.ctx.wire.event("service", {"service": self.name, "type": "start", "pid": proc.pid, "port": self.port})
        pump = threading.Thread(target=self._pump, args=(proc,), name="log-" + self.name, daemon=True)
        pump.start()
        threading.Thread(target=self._probe, args=(generation, proc), name="probe-" + self.name, daemon=True).start()
        rc = proc.wait()
        # The shell is gone; anything it left in its group would hold the port across the restart.
        if group_alive(proc.pid):
            stop_group(proc.pid, 1.0)
        info: JsonDict = dict(exit_info(rc))
        info["at"] = now_iso()
        with self.cond:
            self.last_exit = info
            self.pid = None
            self.proc = None
            if self.readiness == "pending":
                self.readiness_error = "process exited with code %d before it was ready" % info["exitCode"]
            self.cond.notify_all()
            stopping = self.stop_requested
        pump.join(timeout=1.0)
        how = "signal %s" % info["signal"] if "signal" in info else "code %d" % info["exitCode"]
        if stopping:
            self.log.note("stopped (%s)" % how)
        else:
            self.log.note("exited with %s; restarting in %.0f s" % (how, self.restart_delay_s))
        self.ctx.wire.event("service", {"service": self.name, "type": "exit", **info})

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None  # started with stdout=PIPE
        fd = proc.stdout.fileno()
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self.log.write(chunk)
        except OSError:
            pass
        finally:
            try:
                proc.stdout.close()
            except OSError:
                pass

    # -- readiness

    def _probe(self, generation: int, proc: subprocess.Popen[bytes]) -> None:
        health = self.spec.get("health") or {"kind": "tcp"}
        kind = health.get("kind", "tcp")
        timeout_ms: int = self.spec["timeoutMs"]
        deadline = mono() + timeout_ms / 1000.0
        last_error: str | None = "not probed yet"
        while True:
            with self.cond:
                if self.spawns != generation or self.stop_requested or proc.poll() is not None:
                    return
            ok: bool
            if kind == "process":
                ok, last_error = True, None
            elif kind == "http":
                ok, last_error = probe_http(self.port, health.get("path") or "/")
            else:
                ok, last_error = probe_tcp(self.port)
            with self.cond:
                if self.spawns != generation or self.stop_requested:
                    return
                if ok:
                    self.readiness = "ready"
                    self.readiness_error = None
                    self.ready_at = now_iso()
                    self.cond.notify_all()
                    break
                self.readiness_error = last_error
                if mono() >= deadline:
                    self.readiness = "failed"
                    self.cond.notify_all()
                    break
            time.sleep(PROBE_INTERVAL_S)
        if self.readiness == "ready":
            self.log.note("ready (%s)" % describe_health(health, self.port))
            self.ctx.wire.event("service", {"service": self.name, "type": "ready"})
        else:
            self.log.note("not ready within %d ms: %s" % (timeout_ms, last_error))
            self.ctx.wire.event("service", {"service": self.name, "type": "not-ready", "error": last_error})

    def wait_ready(self, deadline: float) -> bool:
        with self.cond:
            while self.readiness != "ready" and not self.stop_requested:
                remaining = deadline - mono()
                if remaining <= 0:
                    # The caller's deadline can pass a moment before the probe's own: report the
                    # same verdict either way. A later successful probe still flips it to ready.
                    if self.readiness == "pending":
                        self.readiness = "failed"
                    return False
                self.cond.wait(min(remaining, 0.5))
            return self.readiness == "ready"

    def not_ready_failure(self, timeout_ms: int) -> JsonDict:
        with self.cond:
            detail = self.readiness_error or "no answer"
            if self.restarts:
                detail += "; restarted %d times" % self.restarts
            if self.last_exit is not None and "exitCode" in self.last_exit:
                detail += "; last exit code %d" % self.last_exit["exitCode"]
        health = self.spec.get("health") or {"kind": "tcp"}
        return {
            "service": self.name,
            "code": "SERVICE_NOT_READY",
            "message": "service %s was not ready within %d ms (%s: %s); it stays supervised; read its log with "
            "logs for service %s (guest file %s)"
            % (self.name, timeout_ms, describe_health(health, self.port), detail, self.name, self.log.path),
            "logPath": self.log.path,
        }

    # -- stop

    def stop(self) -> None:
        with self.cond:
            self.stop_requested = True
            proc = self.proc
            if proc is not None:
                self.state = "stopping"
            self.cond.notify_all()
        if proc is not None:
            stop_group(proc.pid, SERVICE_STOP_GRACE_S)
        if self.thread is not None:
            self.thread.join(timeout=SERVICE_STOP_GRACE_S + 3.0)
        with self.cond:
            self.state = "stopped"
            self.cond.notify_all()

    @property
    def live(self) -> bool:
        return not self.stop_requested

    def status(self) -> JsonDict:
        with self.cond:
            return {
                "name": self.name,
                "state": self.state,
                "pid": self.pid,
                "port": self.port,
                "restarts": self.restarts,
                "lastExit": self.last_exit,
                "readiness": {"state": self.readiness, "error": self.readiness_error, "readyAt": self.ready_at},
                "startedAt": self.started_at,
                "command": self.spec["command"],
                "cwd": self.ctx.resolve_cwd(self.spec.get("cwd")),
                "health": self.spec.get("health") or {"kind": "tcp"},
                "adhoc": bool(self.spec.get("adhoc")),
                "logPath": self.log.path,
            }


def describe_health(health: JsonDict, port: int) -> str:
    kind = health.get("kind", "tcp")
    if kind == "http":
        return "HTTP GET %s on port %d" % (health.get("path") or "/", port)
    if kind == "process":
        return "process running"
    return "TCP connect to port %d" % port


def probe_tcp(port: int) -> Probe:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True, None
    except OSError as err:
        return False, "TCP port %d: %s" % (port, err.strerror or err)


def probe_http(port: int, path: str) -> Probe:
    # Imported here: http.client (with email and ssl) was a quarter of the agent's start in a TCG
    # guest, and only HTTP health checks need it.
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    try:
        conn.request("GET", path, headers={"Host": "127.0.0.1:%d" % port, "User-Agent": "pi-sandbox-agent"})
        resp = conn.getresponse()
        resp.read(65536)
        if 200 <= resp.status < 400:
            return True, None
        return False, "HTTP GET %s answered %d" % (path, resp.status)
    except (OSError, http.client.HTTPException) as err:
        return False, "HTTP GET %s on port %d: %s" % (path, port, getattr(err, "strerror", None) or err)
    finally:
        conn.close()


def check_service_spec(raw: Any, default_timeout_ms: int) -> JsonDict:
    if not isinstance(raw, dict):
        raise AgentError("INVALID_ARGUMENT", "each service spec must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name or len(name) > 32 or not set(name) <= SERVICE_NAME_CHARS or name[0] == "-":
        raise AgentError("INVALID_ARGUMENT", "service name %r is not valid" % (name,), {"key": "name"})
    spec: JsonDict = {"name": name, "command": check_str(raw, "command")}
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise AgentError("INVALID_ARGUMENT", "services.%s.cwd must be a string" % name)
    spec["cwd"] = cwd
    spec["port"] = check_int(raw, "port", None, 1, 65535)
    spec["env"] = check_env(raw.get("env"), "services.%s.env" % name)
    health = raw.get("health") or {"kind": "tcp"}
    if not isinstance(health, dict) or health.get("kind") not in HEALTH_KINDS:
        raise AgentError("INVALID_ARGUMENT", "services.%s.health.kind must be tcp, http or process" % name)
    if health["kind"] == "http":
        path = health.get("path") or "/"
        if not isinstance(path, str) or not path.startswith("/"):
            raise AgentError("INVALID_ARGUMENT", "services.%s.health.path must start with /" % name)
        health = {"kind": "http", "path": path}
    else:
        health = {"kind": health["kind"]}
    spec["health"] = health
    spec["timeoutMs"] = need_int(raw, "timeoutMs", default_timeout_ms, 1, 3_600_000)
    public_url = raw.get("publicUrl")
    if public_url is not None and not isinstance(public_url, str):
        raise AgentError("INVALID_ARGUMENT", "services.%s.publicUrl must be a string" % name)
    spec["publicUrl"] = public_url
    spec["adhoc"] = bool(raw.get("adhoc"))
    return spec
