"""A new guest's identity from the host's hello: machine-id, hostname, no old ssh host keys."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import HOST_LIMITS, RecordingWire

from pi_sandbox_agent.identity import apply_identity
from pi_sandbox_agent.protocol import PROTOCOL_VERSION, LineReader, await_hello

MACHINE_ID = "0123456789abcdef0123456789abcdef"


def template_etc(tmp_path: Path) -> Path:
    """An /etc as a template's guest leaves it: its machine-id, hostname and ssh host keys."""
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    (etc / "machine-id").write_text("f" * 32 + "\n")
    (etc / "hostname").write_text("tpl\n")
    for key in ["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "ssh_host_rsa_key"]:
        (etc / "ssh" / key).write_text("old key")
    (etc / "ssh" / "sshd_config").write_text("kept")
    return etc


def test_the_guest_gets_the_hosts_machine_id_and_name_and_loses_its_old_host_keys(tmp_path: Path) -> None:
    etc = template_etc(tmp_path)
    named: list[str] = []
    assert apply_identity({"machineId": MACHINE_ID, "hostname": "web-2"}, str(etc), named.append) is True
    assert (etc / "machine-id").read_text() == MACHINE_ID + "\n"
    assert (etc / "hostname").read_text() == "web-2\n"
    assert sorted(p.name for p in (etc / "ssh").iterdir()) == ["sshd_config"]
    assert named == ["web-2"]


def test_a_kernel_that_refuses_the_name_still_counts_the_files_as_written(tmp_path: Path) -> None:
    etc = template_etc(tmp_path)

    def refuse(_name: str) -> None:
        raise PermissionError("not root")

    assert apply_identity({"machineId": MACHINE_ID, "hostname": "web-2"}, str(etc), refuse) is True
    assert (etc / "hostname").read_text() == "web-2\n"


@pytest.mark.parametrize(
    "value",
    [
        None,
        "web",
        {"machineId": MACHINE_ID},
        {"hostname": "web"},
        {"machineId": "F" * 32, "hostname": "web"},
        {"machineId": MACHINE_ID[:-1], "hostname": "web"},
        {"machineId": MACHINE_ID + "\n", "hostname": "web"},
        {"machineId": MACHINE_ID, "hostname": "web-"},
        {"machineId": MACHINE_ID, "hostname": "a;reboot"},
        {"machineId": MACHINE_ID, "hostname": "x" * 65},
        {"machineId": MACHINE_ID, "hostname": 7},
    ],
)
def test_anything_but_a_well_formed_identity_changes_nothing(tmp_path: Path, value: object) -> None:
    etc = template_etc(tmp_path)
    named: list[str] = []
    assert apply_identity(value, str(etc), named.append) is False
    assert (etc / "hostname").read_text() == "tpl\n"
    assert (etc / "machine-id").read_text() == "f" * 32 + "\n"
    assert len(list((etc / "ssh").iterdir())) == 4
    assert named == []


def test_an_etc_that_cannot_be_written_is_not_claimed(tmp_path: Path) -> None:
    assert apply_identity({"machineId": MACHINE_ID, "hostname": "web"}, str(tmp_path / "missing"), print) is False


def hello_reply(args: dict[str, object]) -> tuple[object, dict[str, object]]:
    request = {"id": 1, "op": "hello", "args": {"protocol": PROTOCOL_VERSION, "limits": HOST_LIMITS, **args}}
    reader = LineReader(io.BytesIO((json.dumps(request) + "\n").encode()))
    hello = await_hello(reader, RecordingWire())
    assert hello is not None
    return hello.id, hello.ack


def test_the_hellos_acceptance_says_whether_the_identity_was_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[object] = []

    def apply(value: object) -> bool:
        applied.append(value)
        return True

    monkeypatch.setattr("pi_sandbox_agent.protocol.apply_identity", apply)
    identity = {"machineId": MACHINE_ID, "hostname": "web"}
    assert hello_reply({"identity": identity}) == (1, {"protocol": PROTOCOL_VERSION, "identity": True})
    assert applied == [identity]
    # A hello without one (every attach but a new guest's first) changes nothing and claims nothing.
    assert hello_reply({}) == (1, {"protocol": PROTOCOL_VERSION})
    assert applied == [identity]
    monkeypatch.setattr("pi_sandbox_agent.protocol.apply_identity", lambda _value: False)
    assert hello_reply({"identity": identity}) == (1, {"protocol": PROTOCOL_VERSION})
