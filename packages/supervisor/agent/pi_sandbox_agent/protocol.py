"""The wire protocol: line-delimited JSON on the agent's stdin (requests) and stdout (the rest).

    request   {"id": 7, "op": "exec", "args": {...}}
    response  {"id": 7, "ok": true, "result": {...}}
              {"id": 7, "ok": false, "error": {"code": "...", "message": "...", "details": {...}}}
    event     {"event": "service", "data": {...}}

Start-up: the agent sends the `hello` event (its protocol version and facts), then serves nothing
but a `hello` request, whose args carry the host's protocol version and every limit the agent
applies (`Limits`). Until that exchange succeeds other requests fail with HELLO_REQUIRED. The
host side of this module is `src/protocol.ts`.
"""

from __future__ import annotations

import json
import os
import threading
from typing import IO, Any, NamedTuple

from .entropy import mix_host_entropy
from .identity import apply_identity

PROTOCOL_VERSION = 2
AGENT_VERSION = "0.2.0"

# The one size the agent must know before hello, since the hello request is read under it: the
# longest request line accepted. The host's largest request is a 256 KiB chunk as base64 or a set
# of service specs from a 1 MiB YAML; a longer line is dropped with a protocol-error event.
REQUEST_LINE_MAX_BYTES = 4 * 1024 * 1024

JsonDict = dict[str, Any]


class AgentError(Exception):
    """An error reported to the host with a stable code."""

    def __init__(self, code: str, message: str, details: JsonDict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: JsonDict = details or {}


class Limits(NamedTuple):
    """Every limit the host sets, received in the hello request (the host's `LIMITS` and its file
    transfer sizes). Field `output_max_bytes` arrives as `outputMaxBytes`, and so on. A NamedTuple,
    not a dataclass: dataclasses imports inspect, a tenth of the agent's start in a TCG guest."""

    output_max_bytes: int
    exec_wait_default_ms: int
    exec_wait_max_ms: int
    completed_exec_handles: int
    setup_deadline_ms: int
    resume_wait_ms: int
    readiness_default_ms: int
    adhoc_readiness_ms: int
    service_restart_delay_ms: int
    log_lines_default: int
    log_lines_max: int
    transfer_chunk_bytes: int
    read_max_bytes: int
    write_max_bytes: int


def wire_name(field: str) -> str:
    """snake_case field name -> the host's camelCase key."""
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


# Markers and the head/tail split of capped output need some room.
_MINIMUM = {"output_max_bytes": 1024, "service_restart_delay_ms": 0}
_LARGEST = 1 << 40


def parse_limits(raw: Any) -> Limits:
    """Validates the host's limits; extra keys (limits the agent does not apply) are ignored."""
    if not isinstance(raw, dict):
        raise AgentError("INVALID_ARGUMENT", "limits must be an object", {"key": "limits"})
    values: dict[str, int] = {}
    for name in Limits._fields:
        key = wire_name(name)
        value = raw.get(key)
        low = _MINIMUM.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _LARGEST:
            raise AgentError(
                "INVALID_ARGUMENT", "limits.%s must be an integer from %d to %d" % (key, low, _LARGEST), {"key": key}
            )
        values[name] = value
    limits = Limits(**values)
    if limits.exec_wait_default_ms > limits.exec_wait_max_ms or limits.log_lines_default > limits.log_lines_max:
        raise AgentError("INVALID_ARGUMENT", "a default limit is above its maximum", {"key": "limits"})
    return limits


def accept_hello(args: JsonDict) -> Limits:
    """The host's hello: same protocol version, and the limits to apply."""
    protocol = args.get("protocol")
    if protocol != PROTOCOL_VERSION:
        raise AgentError(
            "PROTOCOL_MISMATCH",
            "the host speaks protocol %r, this agent %d" % (protocol, PROTOCOL_VERSION),
            {"protocol": PROTOCOL_VERSION, "hostProtocol": protocol},
        )
    return parse_limits(args.get("limits"))


# ---------------------------------------------------------------------------------------------
# reading requests


class LineTooLong(Exception):
    """A request line longer than the reader's bound; the whole line was skipped."""


class LineReader:
    """Reads request lines of at most `max_bytes` from a binary stream."""

    def __init__(self, stream: IO[bytes], max_bytes: int = REQUEST_LINE_MAX_BYTES):
        self._stream = stream
        self.max_bytes = max_bytes

    def next_line(self) -> bytes | None:
        """The next line (newline included), None at end of input; raises LineTooLong."""
        line = self._stream.readline(self.max_bytes + 1)
        if not line:
            return None
        if len(line) > self.max_bytes and not line.endswith(b"\n"):
            # Skip the rest of the oversized line; its request id is unknown.
            while line and not line.endswith(b"\n"):
                line = self._stream.readline(self.max_bytes)
            raise LineTooLong("request line longer than %d bytes dropped" % self.max_bytes)
        return line


class BadRequest(Exception):
    """A line that is not a request; reported as a protocol-error event."""


def parse_request(line: bytes) -> JsonDict | None:
    """A request object with an `id`, None for a blank line; raises BadRequest."""
    line = line.strip()
    if not line:
        return None
    try:
        req = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("request is not JSON") from None
    if not isinstance(req, dict) or "id" not in req:
        raise BadRequest("request has no id")
    return req


def request_args(req: JsonDict) -> JsonDict:
    args = req.get("args") or {}
    if not isinstance(args, dict):
        raise AgentError("INVALID_ARGUMENT", "args must be an object")
    return args


# ---------------------------------------------------------------------------------------------
# writing responses and events


class Wire:
    """Serialises writes of whole JSON lines to the host."""

    def __init__(self, out: IO[bytes]):
        self._out = out
        self._lock = threading.Lock()
        self.broken = False

    def send(self, message: JsonDict) -> None:
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "replace")
        with self._lock:
            if self.broken:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except OSError:
                self.broken = True

    def ok(self, req_id: Any, result: JsonDict) -> None:
        self.send({"id": req_id, "ok": True, "result": result})

    def error(self, req_id: Any, err: AgentError) -> None:
        self.send(
            {"id": req_id, "ok": False, "error": {"code": err.code, "message": err.message, "details": err.details}}
        )

    def event(self, name: str, data: JsonDict) -> None:
        self.send({"event": name, "data": data})


class SwitchWire(Wire):
    """The wire of whichever host session is attached (see daemon.py): events of the agent's own
    (a service started or exited) go there, and are dropped while no host is attached."""

    def __init__(self) -> None:
        super().__init__(open(os.devnull, "wb"))
        self._target: Wire | None = None
        self._switch = threading.Lock()

    def attach(self, wire: Wire | None) -> None:
        with self._switch:
            self._target = wire

    def send(self, message: JsonDict) -> None:
        with self._switch:
            target = self._target
        if target is not None:
            target.send(message)


def next_request(reader: LineReader, wire: Wire) -> JsonDict | None:
    """The host's next request; None at the end of its input. A line that is too long or not a
    request is reported as a `protocol-error` event and skipped, and so is a blank line (silently)."""
    while True:
        try:
            line = reader.next_line()
            if line is None:
                return None
            req = parse_request(line)
        except (LineTooLong, BadRequest) as problem:
            wire.event("protocol-error", {"message": str(problem)})
            continue
        if req is not None:
            return req


# ---------------------------------------------------------------------------------------------
# checks of request arguments


def check_int(args: JsonDict, key: str, default: int | None, lo: int, hi: int) -> int | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or value > hi:
        raise AgentError("INVALID_ARGUMENT", "%s must be an integer from %d to %d" % (key, lo, hi), {"key": key})
    return value


def need_int(args: JsonDict, key: str, default: int, lo: int, hi: int) -> int:
    value = check_int(args, key, default, lo, hi)
    assert value is not None  # a default was given
    return value


def require_int(args: JsonDict, key: str, lo: int, hi: int) -> int:
    """`key`'s integer, which must be there (INVALID_ARGUMENT naming the key when it is not)."""
    value = check_int(args, key, None, lo, hi)
    if value is None:
        raise AgentError("INVALID_ARGUMENT", "%s is required" % key, {"key": key})
    return value


def check_str(args: JsonDict, key: str, allow_empty: bool = False) -> str:
    value = args.get(key)
    if not isinstance(value, str) or (not allow_empty and value == ""):
        raise AgentError("INVALID_ARGUMENT", "%s must be a non-empty string" % key, {"key": key})
    return value


def check_env(value: Any, key: str = "env") -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise AgentError("INVALID_ARGUMENT", "%s must map names to strings" % key, {"key": key})
    return value


def check_abs_path(args: JsonDict, key: str = "path") -> str:
    path = check_str(args, key)
    if not path.startswith("/") or "\0" in path:
        raise AgentError("INVALID_ARGUMENT", "%s must be an absolute guest path, got %r" % (key, path), {"key": key})
    return path


class HostHello(NamedTuple):
    """The host's accepted hello: its request id, its limits, and the reply that accepts it."""

    id: Any
    limits: Limits
    #: The result to send: the protocol version, and `identity: True` when the hello's identity
    #: (a new guest's machine-id and hostname, identity.py) was applied.
    ack: JsonDict


def await_hello(reader: LineReader, wire: Wire) -> HostHello | None:
    """Reads until the host's hello arrives; None at end of input or on shutdown. Anything else is
    refused with HELLO_REQUIRED. The hello's entropy goes into the kernel's pool (entropy.py), and
    its identity, when it carries one, into /etc (identity.py)."""
    while True:
        req = next_request(reader, wire)
        if req is None:
            return None
        op = req.get("op")
        if op == "shutdown":
            wire.ok(req["id"], {})
            return None
        try:
            if op != "hello":
                raise AgentError(
                    "HELLO_REQUIRED",
                    "%r before hello: the host must send its hello (protocol %d) first" % (op, PROTOCOL_VERSION),
                )
            args = request_args(req)
            limits = accept_hello(args)
            mix_host_entropy(args.get("entropy"))
            ack: JsonDict = {"protocol": PROTOCOL_VERSION}
            if "identity" in args and apply_identity(args["identity"]):
                ack["identity"] = True
            return HostHello(req["id"], limits, ack)
        except AgentError as err:
            wire.error(req["id"], err)
