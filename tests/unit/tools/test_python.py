import asyncio
import time

from noetl.worker.tools import get_tool
from noetl.worker.tools.python import _compile, playbook_line
from tests.unit.tools.helpers import make_ctx


async def run(config, spec=None, origin=None):
    ctx = make_ctx(spec=spec)
    if origin is not None:
        ctx.extra["code_origin"] = origin
    return await get_tool("python").run(config, ctx)


async def test_main_called_with_args() -> None:
    out = await run(
        {"code": "def main(a, b):\n    return {'sum': a + b, 't': (a, b)}", "args": {"a": 1, "b": 2}}
    )
    assert out == {"status": "ok", "result": {"sum": 3, "t": [1, 2]}}


async def test_script_form_reads_args_as_globals_and_returns_result() -> None:
    out = await run({"code": "result = {'n': n * 2}", "args": {"n": 21}})
    assert out == {"status": "ok", "result": {"n": 42}}


async def test_script_without_result_returns_none() -> None:
    out = await run({"code": "x = 1"})
    assert out == {"status": "ok", "result": None}


async def test_exception_is_python_error_with_type_and_line() -> None:
    out = await run({"code": "def main(text):\n    return int(text)\n", "args": {"text": "abc"}})
    assert out["status"] == "error"
    assert out["error"]["kind"] == "python_error"
    assert out["error"]["retryable"] is False
    assert out["error"]["message"].startswith("ValueError: invalid literal for int()")
    assert out["py"] == {"exception_type": "ValueError", "line": 2}


async def test_syntax_error_is_python_error() -> None:
    out = await run({"code": "def main(:\n  pass"})
    assert out["error"]["kind"] == "python_error"
    assert out["py"]["exception_type"] == "SyntaxError"
    assert out["py"]["line"] == 1
    assert out["error"]["message"].endswith(
        " (task 't' of step 'start', line 1 of the task's code: def main(:)"
    )


PLAYBOOK = """workflow:
  - step: start
    tool:
      - name: t
        kind: python
        args: {row: {price: 3}}
        code: |
          def main(row):
              price = row['price']
              total = row['amount'] * price
              return total
"""
CODE = "def main(row):\n    price = row['price']\n    total = row['amount'] * price\n    return total\n"


async def test_error_message_names_task_step_line_and_the_code_line() -> None:
    out = await run({"code": CODE, "args": {"row": {"price": 3}}}, origin=(PLAYBOOK, 4))
    assert out["error"] == {
        "kind": "python_error",
        "message": "KeyError: 'amount' (task 't' of step 'start', line 3 of the task's code: "
        "total = row['amount'] * price)",
        "retryable": False,
        "line": 3,
        "playbook_line": 10,
    }
    assert out["py"] == {"exception_type": "KeyError", "line": 3}  # unchanged


async def test_error_without_origin_has_no_playbook_line_and_long_lines_are_cut() -> None:
    code = "x = {'a': 1}\ny = x['b'] + " + " + ".join(["1"] * 100)
    out = await run({"code": code})
    message = out["error"]["message"]
    assert message.startswith(
        "KeyError: 'b' (task 't' of step 'start', line 2 of the task's code: y = x['b'] + 1"
    )
    assert message.endswith("...)") and len(message) < 260
    assert "playbook_line" not in out["error"]


def test_playbook_line_of_block_and_one_line_code() -> None:
    assert playbook_line(PLAYBOOK, 4, CODE, 1) == 8
    assert playbook_line(PLAYBOOK, 4, CODE, 4) == 11
    one = "tool:\n  - name: t\n    kind: python\n    code: \"result = row['x']\"\n"
    assert playbook_line(one, 2, "result = row['x']", 1) == 4


def test_playbook_line_is_none_when_the_text_does_not_map_line_for_line() -> None:
    folded = PLAYBOOK.replace("code: |", "code: >")
    assert playbook_line(folded, 4, CODE, 3) is None  # the lines there are other text
    escaped = 'tool:\n  - name: t\n    code: "a = 1\\nb = c"\n'
    assert playbook_line(escaped, 2, "a = 1\nb = c", 2) is None
    assert playbook_line(PLAYBOOK, 4, CODE, 9) is None  # no such code line
    assert playbook_line(PLAYBOOK, 4, "other = 1\n", 1) is None  # not this task's code


async def test_system_exit_does_not_escape() -> None:
    out = await run({"code": "import sys\nsys.exit(3)"})
    assert out["error"]["kind"] == "python_error"
    assert out["py"]["exception_type"] == "SystemExit"


async def test_non_serializable_result_is_a_clear_error() -> None:
    out = await run({"code": "import datetime\ndef main():\n    return {'when': datetime.date(2020, 1, 1)}"})
    assert out["error"]["kind"] == "python_error"
    assert "python task 't' of step 'start': its result is not JSON-serializable" in out["error"]["message"]
    assert "date at result['when']" in out["error"]["message"]


async def test_non_string_keys_become_strings_like_json() -> None:
    out = await run({"code": "def main():\n    return {1: 'a', None: 'b'}"})
    assert out["result"] == {"1": "a", "null": "b"}


async def test_args_are_copied_not_shared() -> None:
    args = {"items": [1, 2]}
    out = await run({"code": "def main(items):\n    items.append(3)\n    return items", "args": args})
    assert out["result"] == [1, 2, 3]
    assert args == {"items": [1, 2]}


async def test_missing_code_is_tool_error() -> None:
    out = await run({"args": {}})
    assert out["error"]["kind"] == "tool_error"


async def test_timeout_stops_a_busy_loop() -> None:
    started = time.perf_counter()
    out = await run({"code": "def main():\n    while True:\n        pass"}, spec={"timeout": {"read": 0.2}})
    assert out["error"]["kind"] == "timeout"
    assert out["error"]["retryable"] is True
    assert time.perf_counter() - started < 2
    # the interrupted thread ends by itself
    await asyncio.sleep(0.2)
    import threading

    assert not [t for t in threading.enumerate() if t.name == "noetl-python-t"]


async def test_timeout_number_form() -> None:
    out = await run({"code": "import time\ndef main():\n    time.sleep(0.5)"}, spec={"timeout": 0.05})
    assert out["error"]["kind"] == "timeout"


async def test_code_runs_off_the_event_loop() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    t = asyncio.create_task(ticker())
    out = await run({"code": "import time\ndef main():\n    time.sleep(0.2)\n    return 1"})
    t.cancel()
    assert out["result"] == 1
    assert ticks >= 5


async def test_print_goes_to_stderr(capsys) -> None:
    out = await run({"code": "print('hello')\nresult = 1"})
    assert out["result"] == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "hello" in captured.err


def test_compile_is_cached() -> None:
    assert _compile("x = 1") is _compile("x = 1")
