"""Services: restart delay from the host's limits, readiness, keep/replace rules, log tails."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from conftest import RecordingWire, wait_until

from pi_sandbox_agent.context import Context
from pi_sandbox_agent.protocol import AgentError, JsonDict
from pi_sandbox_agent.service import check_service_spec
from pi_sandbox_agent.services import Services
from pi_sandbox_agent.state import PortBook

SPEC: JsonDict = {"name": "idle", "command": "exec sleep 600", "health": {"kind": "process"}, "timeoutMs": 5000}


@pytest.fixture
def make_services(make_ctx: Callable[..., Context]) -> Iterator[Callable[..., Services]]:
    made: list[Services] = []

    def make(**changes: int) -> Services:
        ctx = make_ctx(**changes)
        services = Services(ctx, PortBook(ctx.state.ports_file, 30000, 30999))
        made.append(services)
        return services

    yield make
    for services in made:
        services.shutdown()


def status(services: Services, name: str) -> JsonDict:
    found: JsonDict = services.status([name])["services"][0]
    return found


def test_a_crashing_service_is_restarted_after_the_host_delay(
    make_services: Callable[..., Services], wire: RecordingWire
) -> None:
    services = make_services(service_restart_delay_ms=300)
    spec = {"name": "crash", "command": "exit 3", "health": {"kind": "process"}, "timeoutMs": 5000}
    services.ensure([spec], wait=False)

    # The restart count moves before the restarted process's start event is sent: wait for both.
    def started() -> list[JsonDict]:
        return [e for e in wire.events("service") if e["type"] == "start"]

    wait_until(lambda: status(services, "crash")["restarts"] >= 2 and len(started()) >= 3, what="two restarts")
    s = status(services, "crash")
    assert s["lastExit"]["exitCode"] == 3
    starts = started()
    exits = [e for e in wire.events("service") if e["type"] == "exit"]
    assert len(starts) >= 3 and all(e["exitCode"] == 3 for e in exits)
    assert all(e["service"] == "crash" and e["port"] == s["port"] for e in starts)


def test_restart_delay_is_the_host_value(make_services: Callable[..., Services]) -> None:
    services = make_services(service_restart_delay_ms=600)
    spec = {"name": "crash", "command": "exit 1", "health": {"kind": "process"}, "timeoutMs": 5000}
    services.ensure([spec], wait=False)
    wait_until(lambda: status(services, "crash")["state"] == "restarting", what="restarting")
    t0 = time.monotonic()
    wait_until(lambda: status(services, "crash")["restarts"] == 1, what="first restart")
    assert 0.4 < time.monotonic() - t0 < 2.0


def test_ensure_keeps_a_live_service_and_restart_keeps_its_port(make_services: Callable[..., Services]) -> None:
    services = make_services()
    first = services.ensure([SPEC])
    assert first["started"] == ["idle"] and first["failures"] == []
    before = status(services, "idle")
    again = services.ensure([SPEC])
    assert again["started"] == [] and again["kept"] == ["idle"]
    assert status(services, "idle")["pid"] == before["pid"]
    restarted = services.restart([{"name": "idle"}])
    after = status(services, "idle")
    assert restarted["restarted"] == ["idle"]
    assert after["port"] == before["port"] and after["pid"] != before["pid"]


def test_a_service_that_never_listens_fails_readiness_but_stays_supervised(
    make_services: Callable[..., Services],
) -> None:
    services = make_services()
    spec = {"name": "mute", "command": "exec sleep 600", "timeoutMs": 300}
    result = services.ensure([spec])
    [failure] = result["failures"]
    assert failure["code"] == "SERVICE_NOT_READY" and failure["service"] == "mute"
    assert "TCP connect to port" in failure["message"]
    assert status(services, "mute")["state"] == "running"


def test_adhoc_readiness_is_capped_at_the_host_limit(make_services: Callable[..., Services]) -> None:
    services = make_services(adhoc_readiness_ms=200)
    t0 = time.monotonic()
    result = services.start_adhoc({"name": "slow", "command": "exec sleep 600", "timeoutMs": 60_000})
    assert time.monotonic() - t0 < 5
    assert [f["service"] for f in result["failures"]] == ["slow"]
    assert "within 200 ms" in result["failures"][0]["message"]
    with pytest.raises(AgentError) as declared:
        services.ensure([dict(SPEC, name="decl")])
        services.start_adhoc(dict(SPEC, name="decl"))
    assert declared.value.code == "SERVICE_DECLARED"


def test_log_lines_are_bounded_by_the_host_limits(make_services: Callable[..., Services]) -> None:
    services = make_services(log_lines_max=5, log_lines_default=3)
    services.ensure([dict(SPEC, command="for i in 1 2 3 4 5 6 7; do echo line$i; done; exec sleep 600")])
    wait_until(lambda: "line7" in services.op_logs({"service": "idle", "lines": 5})["text"], what="log lines")
    tail = services.op_logs({"service": "idle", "lines": 5})
    assert tail["lines"] == 5 and tail["text"].count("\n") == 5
    assert services.op_logs({"service": "idle"})["lines"] == 3
    with pytest.raises(AgentError) as caught:
        services.op_logs({"service": "idle", "lines": 6})
    assert caught.value.code == "INVALID_ARGUMENT"
    with pytest.raises(AgentError) as unknown:
        services.op_logs({"service": "nobody"})
    assert unknown.value.code == "SERVICE_NOT_FOUND"


def test_service_specs_are_validated() -> None:
    spec = check_service_spec({"name": "web", "command": "run", "health": {"kind": "http"}}, 30_000)
    assert spec["health"] == {"kind": "http", "path": "/"} and spec["timeoutMs"] == 30_000
    for bad in (
        {"name": "Web", "command": "run"},
        {"name": "web", "command": ""},
        {"name": "web", "command": "run", "port": 70000},
        {"name": "web", "command": "run", "health": {"kind": "udp"}},
        {"name": "web", "command": "run", "env": {"A": 1}},
        "web",
    ):
        with pytest.raises(AgentError):
            check_service_spec(bad, 30_000)


def test_stop_is_sticky_and_names_unknown_services(make_services: Callable[..., Services]) -> None:
    services = make_services()
    services.ensure([SPEC])
    stopped = services.stop(["idle", "ghost"])
    assert stopped["stopped"] == ["idle"] and stopped["unknown"] == ["ghost"]
    assert status(services, "idle")["state"] == "stopped"
    assert services.ensure([SPEC])["started"] == ["idle"]


def test_ensure_with_only_starts_just_those_and_avoids_the_fixed_ports_of_the_rest(
    make_services: Callable[..., Services],
) -> None:
    services = make_services()
    fixed = dict(SPEC, name="fixed", port=30500)
    other = dict(SPEC, name="other")
    result = services.ensure([fixed, SPEC, other], only=["idle"])
    assert result["started"] == ["idle"] and result["kept"] == []
    assert [s["name"] for s in result["services"]] == ["idle"]
    assert status(services, "idle")["port"] != 30500
    with pytest.raises(AgentError) as err:
        services.ensure([SPEC], only=["ghost"])
    assert err.value.code == "INVALID_ARGUMENT"
    assert [s["name"] for s in services.status(None)["services"]] == ["idle"]
