"""The agent: its parts wired together, and the request loop that serves the host."""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any, Callable

from .cleanup import Cleanup
from .context import Context
from .disk_transfer import DiskTransfers
from .execs import Execs
from .file_tree import file_list, file_mkdir, file_stat
from .files import Transfers
from .jobs import Jobs
from .log_follow import LogFollow
from .protocol import AgentError, JsonDict, LineReader, Wire, next_request, request_args
from .runs import Runs
from .services import Services
from .state import PortBook
from .warm_shell import WarmShells

MAX_IN_FLIGHT = 512

Handler = Callable[[JsonDict], JsonDict]
# A request and the wire of the session it came from (its reply must never reach another session).
Item = tuple[JsonDict, Wire]


class WorkerPool:
    """Runs each submitted item on its own thread, reusing idle threads instead of starting one
    per request (a thread start costs milliseconds in an emulated guest). Threads beyond
    `keep_idle` idle ones end after their item, so a burst does not leave hundreds behind."""

    def __init__(self, fn: Callable[[Item], None], keep_idle: int = 8):
        self._fn = fn
        self._keep_idle = keep_idle
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, item: Item) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # that idle thread is now spoken for
        self._queue.put(item)
        if spawn:
            threading.Thread(target=self._work, name="worker", daemon=True).start()

    def _work(self) -> None:
        # Every queued item has its own consumer: an idle thread reserved by submit, or a new one.
        while True:
            self._fn(self._queue.get())
            with self._lock:
                if self._idle >= self._keep_idle:
                    return
                self._idle += 1


class Agent:
    """Serves requests once the host said hello. Every request runs on its own thread, so a slow
    wait never holds up kills, file transfers or other commands."""

    def __init__(self, ctx: Context, cleanup: Cleanup, ports: PortBook, warm_shell: bool, facts: JsonDict):
        self.ctx = ctx
        self.cleanup = cleanup
        self.facts = facts
        self.jobs = Jobs(ctx.limits.completed_exec_handles)
        self.warm = WarmShells(ctx, self.jobs, warm_shell)
        self.execs = Execs(ctx, self.jobs, self.warm)
        self.runs = Runs(ctx, self.jobs, cleanup)
        self.services = Services(ctx, ports)
        self.transfers = Transfers(ctx.limits)
        self.disk = DiskTransfers(self.transfers)
        self.log_follow = LogFollow(ctx.limits, self.services.known, self.services.log_path)
        self._workers = WorkerPool(self._handle)
        self._in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self._shutdown = threading.Event()
        threading.Thread(
            target=self.jobs.watch_output, args=(self._shutdown,), name="output-bound", daemon=True
        ).start()
        self.handlers: dict[str, Handler] = {
            "ping": lambda args: dict(self.facts, **self.jobs.activity()),
            "hello": self.op_hello_again,
            "exec": self.execs.exec,
            "exec-status": self.execs.status,
            "exec-kill": self.execs.kill,
            "file-read-open": self.transfers.read_open,
            "file-read-chunk": self.transfers.read_chunk,
            "file-read-stream": self.transfers.read_stream,
            "file-read-close": self.transfers.read_close,
            "file-write-open": self.transfers.write_open,
            "file-write-chunk": self.transfers.write_chunk,
            "file-write-stream": self.transfers.write_stream,
            "file-write-commit": self.transfers.write_commit,
            "file-write-abort": self.transfers.write_abort,
            "file-disk-read-open": self.disk.read_open,
            "file-disk-read-piece": self.disk.read_piece,
            "file-disk-write-open": self.disk.write_open,
            "file-disk-write-piece": self.disk.write_piece,
            "file-disk-write-commit": self.disk.write_commit,
            "file-stat": file_stat,
            "file-list": file_list,
            "file-mkdir": file_mkdir,
            "service-ensure": self.services.op_ensure,
            "service-restart": self.services.op_restart,
            "service-stop": self.services.op_stop,
            "service-status": self.services.op_status,
            "service-start": self.services.op_start,
            "logs": self.services.op_logs,
            "logs-follow": self.log_follow.op,
            "run-setup": self.runs.setup,
            "run-resume": self.runs.resume,
            "run-cancel": self.runs.cancel,
            "run-follow": self.runs.follow,
        }

    def op_hello_again(self, args: JsonDict) -> JsonDict:
        raise AgentError("PROTOCOL_MISMATCH", "hello was already exchanged; the limits of a session are fixed")

    # -- dispatch

    def serve(self, reader: LineReader, wire: Wire | None = None, outlive: bool = False) -> bool:
        """Serves one host session until its input ends or it asks for shutdown. Without `outlive`
        the end of input shuts the agent down too; with it (daemon.py) the agent and its services
        go on for the next session. Returns whether the agent was shut down."""
        wire = wire or self.ctx.wire
        self.warm.refill(self.ctx.workspace)
        while not self._shutdown.is_set():
            req = next_request(reader, wire)
            if req is None:
                break
            if req.get("op") == "shutdown":
                wire.ok(req["id"], {})
                self.shutdown()
                return True
            if not self._in_flight.acquire(blocking=False):
                wire.error(req["id"], AgentError("AGENT_BUSY", "more than %d requests in flight" % MAX_IN_FLIGHT))
                continue
            self._workers.submit((req, wire))
        if outlive and not self._shutdown.is_set():
            return False
        self.shutdown()
        return True

    def _handle(self, item: Item) -> None:
        req, wire = item
        req_id: Any = req["id"]
        try:
            op = req.get("op")
            handler = self.handlers.get(op) if isinstance(op, str) else None
            if handler is None:
                raise AgentError("UNKNOWN_OP", "unknown operation %r" % (op,))
            wire.ok(req_id, handler(request_args(req)))
        except AgentError as err:
            wire.error(req_id, err)
        except Exception as err:  # a bug in one request must not kill the channel
            import traceback  # only here: with linecache and tokenize, ~0.3 s of a start under TCG

            sys.stderr.write(traceback.format_exc())
            sys.stderr.flush()
            wire.error(req_id, AgentError("AGENT_INTERNAL", "agent error: %s" % err))
        finally:
            self._in_flight.release()

    def shutdown(self) -> None:
        if self._shutdown.is_set():
            return
        self._shutdown.set()
        self.warm.stop()
        for job in self.jobs.running():
            threading.Thread(target=job.kill, daemon=True).start()
        self.services.shutdown()
        for job in self.jobs.running():
            job.kill()
        self.cleanup.close()
