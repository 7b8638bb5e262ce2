"""Template names against their scope, ctx keys against the paths that write them, args keys
against the incoming arcs."""

from __future__ import annotations

from noetl.dsl.analysis import check_text
from tests.unit.analysis.helpers import codes, findings, only, playbook


def _task(field: str, step_extra: str = "", arcs: str = "") -> str:
    return f"""
    - step: start
{step_extra}      tool:
        - name: t
          kind: noop
          result: "{field}"
{arcs}
    """


def test_iter_outside_a_loop_step() -> None:
    (f,) = only(_task("{{ iter.page }}"), "name-out-of-scope")
    assert f.severity == "error" and f.path == "workflow[0].tool[0].result"
    assert "step `start` has none" in f.message
    assert codes(_task("{{ iter.page }}", "      loop: {in: [1], iterator: page}\n")) == []


def test_guarded_out_of_scope_use_is_a_warning() -> None:
    (f,) = only(_task("{{ iter.page | default(1) }}"), "name-out-of-scope")
    assert f.severity == "warning" and "the default always applies" in f.message


def test_outcome_outside_a_task_policy_and_event_outside_arcs() -> None:
    assert codes(_task("{{ outcome.result }}")) == ["name-out-of-scope"]
    (f,) = only(_task("{{ event.result }}"), "name-out-of-scope")
    assert "`event` exists only in arcs" in f.message
    policy = """
    - step: start
      tool:
        - name: t
          kind: noop
          spec:
            policy:
              rules:
                - when: "{{ outcome.status == 'ok' and event.name == 'x' }}"
                  then: {do: continue}
    """
    (f,) = findings(policy)
    assert f.code == "name-out-of-scope" and "`event`" in f.message


def test_server_side_templates_see_no_worker_names() -> None:
    wf = """
    - step: start
      loop: {in: [1], iterator: x}
      tool: [{name: fetch, kind: noop}]
      next:
        arcs:
          - step: after
            when: "{{ event.name == 'loop.done' }}"
            args:
              a: "{{ iter.x }}"
              b: "{{ keychain.pg.password }}"
              c: "{{ _prev }}"
              d: "{{ fetch.rows }}"
              e: "{{ outcome.result }}"
    - step: after
      tool: {kind: noop}
    """
    found = only(wf, "name-out-of-scope")
    assert [f.path.rsplit(".", 1)[1] for f in found] == ["a", "b", "c", "d", "e"]
    assert "never see it" in found[0].message and "only on the worker" in found[1].message
    assert "event.result" in found[3].message


def test_event_is_defined_in_admission_and_arcs() -> None:
    wf = """
    - step: start
      tool: {kind: noop}
      next: {arcs: [{step: gate, args: {r: "{{ event.result }}"}}]}
    - step: gate
      spec:
        policy:
          admit:
            rules: [{when: "{{ event.status == 'success' and args.r is defined }}", then: {allow: true}}]
      tool: {kind: noop}
    """
    assert codes(wf) == []


def test_task_labels_are_scoped_to_their_pipeline() -> None:
    wf = """
    - step: start
      tool:
        - {name: five, kind: noop, result: 5}
        - {name: use, kind: noop, result: "{{ five + 1 }}"}
      next: {arcs: [{step: other}]}
    - step: other
      tool:
        - {name: t, kind: noop, result: "{{ five }}"}
    """
    (f,) = findings(wf)
    assert (
        f.code == "name-out-of-scope"
        and "task of step `start`" in f.message
        and f.path.startswith("workflow[1]")
    )


def test_unknown_and_legacy_names() -> None:
    (f,) = findings(_task("{{ workloda.x }}"))
    assert f.code == "unknown-name" and f.severity == "error" and "names here:" in f.message
    (f,) = findings(_task("{{ vars.user_id }}"))
    assert f.code == "unknown-name" and "older drafts" in f.message


def test_ctx_read_where_nothing_wrote_it() -> None:
    wf = """
    - step: start
      tool: {kind: noop}
      next:
        arcs:
          - step: writer
            when: "{{ workload.go }}"
          - step: reader
    - step: writer
      tool:
        - name: w
          kind: noop
          spec: {policy: {rules: [{else: {then: {do: continue, set_ctx: {token: abc}}}}]}}
      next: {arcs: [{step: reader}]}
    - step: reader
      tool: [{name: r, kind: noop, result: "{{ ctx.token }}"}]
    """
    (f,) = findings(wf)
    assert f.code == "ctx-unwritten" and f.path == "workflow[2].tool[0].result"
    assert "written only by `writer`" in f.message
    # on every path: clean; guarded: clean
    assert codes(wf.replace("          - step: reader\n    - step: writer", "    - step: writer")) == []
    assert codes(wf.replace("{{ ctx.token }}", "{{ ctx.token | default('') }}")) == []


def test_ctx_written_earlier_in_the_same_pipeline_counts() -> None:
    wf = """
    - step: start
      tool:
        - name: w
          kind: noop
          spec: {policy: {rules: [{else: {then: {do: continue, set_ctx: {n: 1}}}}]}}
        - {name: r, kind: noop, result: "{{ ctx.n }}"}
    """
    assert codes(wf) == []
    swapped = """
    - step: start
      tool:
        - {name: r, kind: noop, result: "{{ ctx.n }}"}
        - name: w
          kind: noop
          spec: {policy: {rules: [{else: {then: {do: continue, set_ctx: {n: 1}}}}]}}
    """
    assert codes(swapped) == ["ctx-unwritten"]


def test_args_that_an_incoming_arc_does_not_pass() -> None:
    wf = """
    - step: start
      tool: {kind: noop}
      next:
        spec: {mode: inclusive}
        arcs:
          - {step: work, args: {n: 1}}
          - {step: work}
    - step: work
      tool: [{name: t, kind: noop, result: "{{ args.n }}"}]
    """
    (f,) = findings(wf)
    assert f.code == "args-missing" and "workflow[0].next.arcs[1]" in f.message and "arcs[0]" not in f.message
    assert codes(wf.replace("- {step: work}", "- {step: work, args: {n: 2}}")) == []
    assert codes(wf.replace("{{ args.n }}", "{{ args.n | default(0) }}")) == []
    (f,) = findings(_task("{{ args.n }}"))
    assert f.code == "args-missing" and "start token" in f.message


def test_ignore_comment_silences_a_finding() -> None:
    text = playbook(
        _task("{{ iter.page }}").replace(
            'result: "{{ iter.page }}"', 'result: "{{ iter.page }}"  # noetl: ignore[name-out-of-scope]'
        )
    )
    assert check_text(text, "t.yaml").findings == []


def test_admission_that_waits_for_a_key_guarantees_it() -> None:
    wf = """
    - step: start
      next:
        spec: {mode: inclusive}
        arcs: [{step: a}, {step: b}]
    - step: a
      tool:
        - {name: t, kind: noop, spec: {policy: {rules: [{else: {then: {set_ctx: {x: 1}}}}]}}}
      next: {arcs: [{step: join}]}
    - step: b
      tool:
        - {name: t, kind: noop, spec: {policy: {rules: [{else: {then: {set_ctx: {y: 2}}}}]}}}
      next: {arcs: [{step: join}]}
    - step: join
      spec:
        policy:
          admit:
            rules:
              - {when: "{{ ctx.x is defined and ctx.y is defined }}", then: {allow: true}}
              - else: {then: {allow: false}}
      tool: [{name: sum, kind: noop, result: "{{ ctx.x + ctx.y }}"}]
    """
    assert codes(wf) == []
    assert codes(wf.replace("ctx.x is defined and ", "")) == ["ctx-unwritten"]
