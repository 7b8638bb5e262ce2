"""Item 5 of issue 26: every operator charges work in proportion to its operands.

Before: ``{{ 3 ** 4000000 % 7 }}`` passed the size check and cost nothing; 15 of them stalled a
server partition for 28 s. ``//`` was not even intercepted (Jinja folded it at compile time)."""

from __future__ import annotations

import time

import pytest

from noetl.dsl.errors import TemplateError
from noetl.dsl.templates import TemplateEngine
from tests.security.conftest import ALICE, Deployment

EXPENSIVE = [
    "{{ 3 ** 4000000 % 7 }}",
    "{{ (7 ** 300000) // (3 ** 200000) > 1 }}",
    "{{ (7 ** 300000) % (3 ** 200000) > 1 }}",
    "{{ (7 ** 500000) * (3 ** 600000) > 1 }}",
    "{% for i in range(5000) %}{% set x = 'ab' * 500000 %}{% endfor %}",  # 5 GB copied, 1 MB at a time
    "{{ 7 ** 900000 // 7 ** 899999 }}",
]


@pytest.mark.parametrize("source", EXPENSIVE)
def test_expensive_operators_are_refused_within_the_budget(source: str) -> None:
    started = time.perf_counter()
    with pytest.raises(TemplateError, match="too much work"):
        TemplateEngine().render(source, {})
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize(
    ("source", "value"),
    [("{{ 2 ** 64 }}", "18446744073709551616"), ("{{ 10 // 3 }}/{{ 10 % 3 }}", "3/1"),
     ("{{ 3 ** 1000 % 7 }}", str(3**1000 % 7)), ("{{ '-' * 20 }}", "-" * 20)],
)
def test_ordinary_arithmetic_is_untouched(source: str, value: str) -> None:
    assert str(TemplateEngine().render(source, {})) == value


PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: burn, path: team_a/burn}
workflow:
  - step: start
    tool: {kind: noop}
    next:
      arcs:
        - {step: end, when: "{{ 3 ** 4000000 % 7 == 1 }}"}
  - step: end
    tool: {kind: noop}
"""


async def test_a_burning_arc_fails_fast_on_the_server(deployment: Deployment) -> None:
    started = time.perf_counter()
    for _ in range(5):
        code, out = await deployment.run(ALICE, {"playbook": PLAYBOOK})
        assert code == 202 and out["status"] == "failed" and out["error"]["kind"] == "template_error", out
    assert time.perf_counter() - started < 10
