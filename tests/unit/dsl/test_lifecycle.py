"""`lifecycle` (time limits, awaited signals), the executor's default timeouts and the names that
enter from outside (SEMANTICS §16-§18): validation names the path and what to write instead."""

from __future__ import annotations

from datetime import UTC, datetime

from noetl.dsl import validate_text
from noetl.dsl.analysis import check_text
from noetl.dsl.cache import parse_playbook
from noetl.dsl.names import schedule_name_problem, signal_name_problem
from noetl.store.schedules import cron_problem, fire_time, nats_cron, next_fire, timezone_problem

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\n"


def messages(body: str) -> list[str]:
    return [f"{p.path}: {p.message}" for p in validate_text(HEAD + body, "t.yaml")]


def test_lifecycle_normalizes() -> None:
    pb = parse_playbook(
        HEAD
        + """
workflow:
  - step: start
    spec: {policy: {lifecycle: {timeout_s: 5, deadline_s: 60, await: {signal: ok, timeout_s: 9}}}}
    tool: {kind: noop}
""",
        "t.yaml",
    )
    lc = pb.step("start").lifecycle
    assert lc is not None and (lc.timeout_s, lc.deadline_s, lc.await_signal, lc.await_timeout_s) == (
        5,
        60,
        "ok",
        9,
    )


def test_bad_lifecycle_is_reported_at_its_path() -> None:
    got = messages("""
workflow:
  - step: start
    spec: {policy: {lifecycle: {timeout_s: -1, ttl: 3, await: {signal: "a.b", timeout_s: "x"}}}}
    tool: {kind: noop}
""")
    text = "\n".join(got)
    assert "lifecycle.timeout_s: `timeout_s` is a number of seconds" in text
    assert "lifecycle.ttl: unknown key" in text
    assert "lifecycle.await.signal: signal name 'a.b' is not valid" in text
    assert "await.timeout_s" in text


def test_await_needs_a_signal() -> None:
    got = messages("""
workflow:
  - step: start
    spec: {policy: {lifecycle: {await: {timeout_s: 3}}}}
    tool: {kind: noop}
""")
    assert any("`await` needs `signal: NAME`" in m for m in got)


def test_executor_default_timeouts() -> None:
    ok = """
executor: {spec: {policy: {defaults: {timeouts: {step_s: 30, execution_s: 3600}}}}}
workflow:
  - step: start
    tool: {kind: noop}
"""
    assert messages(ok) == []
    got = messages(ok.replace("step_s: 30", "step_s: 0, per_task: 1"))
    assert any("timeouts.step_s" in m for m in got) and any(
        "timeouts.per_task: unknown key" in m for m in got
    )


def test_names_that_enter_from_outside() -> None:
    assert signal_name_problem("approval") is None and signal_name_problem("a b")
    assert schedule_name_problem("nightly-1") is None and "noetl.timers.cron" in str(
        schedule_name_problem("a.*")
    )


def test_cron_expressions_and_time_zones() -> None:
    assert nats_cron("30 2 * * *") == "0 30 2 * * *" and nats_cron("*/5 * * * * *") == "*/5 * * * * *"
    assert cron_problem("30 2 * * *") is None and cron_problem("*/5 * * * * *") is None
    assert cron_problem("61 * * * *") and cron_problem("daily")
    assert timezone_problem("Europe/Paris") is None and timezone_problem("Mars/Olympus")
    sch = {"cron": "30 2 * * *", "timezone": "Europe/Paris"}
    nxt = next_fire(sch, datetime(2030, 1, 1, 12, tzinfo=UTC))
    assert nxt.isoformat() == "2030-01-02T02:30:00+01:00"
    fired = fire_time(sch, "2030-01-03T02:30:00+01:00", datetime(2030, 1, 2, 1, 30, 0, 3000, tzinfo=UTC))
    assert fired == datetime(2030, 1, 2, 1, 30, tzinfo=UTC)


def test_check_explains_await_after_an_inclusive_fan_out() -> None:
    result = check_text(
        HEAD
        + """
workflow:
  - step: start
    next:
      spec: {mode: inclusive}
      arcs: [{step: a}, {step: b}]
  - step: a
    spec: {policy: {lifecycle: {await: {signal: go}}}}
    tool: {kind: noop}
  - step: b
    tool: {kind: noop}
""",
        "t.yaml",
    )
    assert [f.code for f in result.findings] == ["await-in-fan-out"]


def test_check_knows_an_awaiting_router_can_time_out() -> None:
    result = check_text(
        HEAD
        + """
workflow:
  - step: start
    spec: {policy: {lifecycle: {await: {signal: approval, timeout_s: 60}}}}
    next:
      arcs:
        - {step: yes, when: "{{ event.name == 'step.done' }}"}
        - {step: late, when: "{{ event.error.kind == 'signal_timeout' }}"}
  - step: yes
    tool: {kind: noop}
  - step: late
    tool: {kind: noop}
""",
        "t.yaml",
    )
    assert result.findings == []
