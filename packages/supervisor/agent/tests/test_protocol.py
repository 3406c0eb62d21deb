"""The wire: request lines, limits from the host's hello, replies and events."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import HOST_LIMITS, RecordingWire

from pi_sandbox_agent.protocol import (
    PROTOCOL_VERSION,
    AgentError,
    BadRequest,
    Limits,
    LineReader,
    LineTooLong,
    Wire,
    accept_hello,
    next_request,
    parse_limits,
    parse_request,
    wire_name,
)

REPO = Path(__file__).resolve().parents[4]


def test_limits_are_read_from_the_host_names_and_extra_keys_are_ignored() -> None:
    limits = parse_limits(HOST_LIMITS)
    assert limits.output_max_bytes == 64 * 1024
    assert limits.transfer_chunk_bytes == 256 * 1024
    assert limits.service_restart_delay_ms == 1000
    assert wire_name("completed_exec_handles") == "completedExecHandles"


def test_every_limit_the_agent_needs_is_one_the_host_has() -> None:
    # The host's table is the one source: every field here must be a LIMITS key in
    # @pi-sandbox/config or one of the transfer sizes src/protocol.ts adds.
    source = (REPO / "packages/config/src/limits.ts").read_text()
    host_keys = set(re.findall(r"^\s+(\w+): ", source, re.M))
    host_keys |= {"transferChunkBytes", "readMaxBytes", "writeMaxBytes"}
    fields = {wire_name(name) for name in Limits._fields}
    assert fields <= host_keys, fields - host_keys
    protocol_ts = (REPO / "packages/supervisor/src/protocol.ts").read_text()
    assert "export const PROTOCOL_VERSION = %d;" % PROTOCOL_VERSION in protocol_ts


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("outputMaxBytes", None),
        ("outputMaxBytes", True),
        ("outputMaxBytes", 100),
        ("logLinesMax", -1),
        ("execWaitMaxMs", "60000"),
    ],
)
def test_missing_or_unusable_limits_are_refused(key: str, value: object) -> None:
    raw = dict(HOST_LIMITS)
    if value is None:
        del raw[key]
    else:
        raw[key] = value
    with pytest.raises(AgentError) as caught:
        parse_limits(raw)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.details == {"key": key}


def test_a_default_above_its_maximum_is_refused() -> None:
    with pytest.raises(AgentError):
        parse_limits(dict(HOST_LIMITS, logLinesDefault=600))
    with pytest.raises(AgentError):
        parse_limits("not an object")


def test_hello_checks_the_host_protocol_version() -> None:
    assert accept_hello({"protocol": PROTOCOL_VERSION, "limits": HOST_LIMITS}).log_lines_max == 500
    with pytest.raises(AgentError) as caught:
        accept_hello({"protocol": PROTOCOL_VERSION - 1, "limits": HOST_LIMITS})
    assert caught.value.code == "PROTOCOL_MISMATCH"
    assert caught.value.details == {"protocol": PROTOCOL_VERSION, "hostProtocol": PROTOCOL_VERSION - 1}


def test_line_reader_drops_an_oversized_line_whole_and_goes_on() -> None:
    stream = io.BytesIO(b"short\n" + b"x" * 100 + b"\nnext\n")
    reader = LineReader(stream, max_bytes=16)
    assert reader.next_line() == b"short\n"
    with pytest.raises(LineTooLong):
        reader.next_line()
    assert reader.next_line() == b"next\n"
    assert reader.next_line() is None


def test_next_request_skips_blank_lines_and_reports_bad_ones_as_protocol_errors() -> None:
    stream = io.BytesIO(b"\n" + b"x" * 100 + b'\n{nope\n{"op": "ping"}\n{"id": 1, "op": "ping"}\n')
    wire = RecordingWire()
    reader = LineReader(stream, max_bytes=64)
    assert next_request(reader, wire) == {"id": 1, "op": "ping"}
    assert [e["message"] for e in wire.events("protocol-error")] == [
        "request line longer than 64 bytes dropped",
        "request is not JSON",
        "request has no id",
    ]
    assert next_request(reader, wire) is None


def test_parse_request_tells_blank_lines_garbage_and_requests_apart() -> None:
    assert parse_request(b"   \n") is None
    assert parse_request(b'{"id": 3, "op": "ping"}\n') == {"id": 3, "op": "ping"}
    with pytest.raises(BadRequest, match="not JSON"):
        parse_request(b"{nope\n")
    with pytest.raises(BadRequest, match="not JSON"):
        parse_request(b"\xff\xfe\n")
    with pytest.raises(BadRequest, match="no id"):
        parse_request(b'{"op": "ping"}\n')
    with pytest.raises(BadRequest, match="no id"):
        parse_request(b"[1, 2]\n")


def test_wire_writes_one_compact_line_per_message() -> None:
    wire = RecordingWire()
    wire.ok(1, {"text": "héllo\n"})
    wire.error(2, AgentError("FILE_NOT_FOUND", "gone", {"path": "/x"}))
    wire.event("service", {"service": "web", "type": "ready"})
    lines = wire.buffer.getvalue().decode().splitlines()
    assert lines[0] == '{"id":1,"ok":true,"result":{"text":"héllo\\n"}}'
    assert json.loads(lines[1])["error"] == {"code": "FILE_NOT_FOUND", "message": "gone", "details": {"path": "/x"}}
    assert json.loads(lines[2]) == {"event": "service", "data": {"service": "web", "type": "ready"}}


def test_a_broken_wire_drops_later_messages_instead_of_raising() -> None:
    class Broken(io.BytesIO):
        def write(self, data: object) -> int:
            raise BrokenPipeError()

    wire = Wire(Broken())
    wire.event("hello", {})
    assert wire.broken
    wire.event("hello", {})
