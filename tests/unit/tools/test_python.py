import asyncio
import time

from noetl.worker.tools import get_tool
from noetl.worker.tools.python import _compile
from tests.unit.tools.helpers import make_ctx


async def run(config, spec=None):
    return await get_tool("python").run(config, make_ctx(spec=spec))


async def test_main_called_with_args() -> None:
    out = await run({"code": "def main(a, b):\n    return {'sum': a + b, 't': (a, b)}",
                     "args": {"a": 1, "b": 2}})
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


async def test_system_exit_does_not_escape() -> None:
    out = await run({"code": "import sys\nsys.exit(3)"})
    assert out["error"]["kind"] == "python_error"
    assert out["py"]["exception_type"] == "SystemExit"


async def test_non_serializable_result_is_a_clear_error() -> None:
    out = await run({"code": "import datetime\ndef main():\n    return {'when': datetime.date(2020, 1, 1)}"})
    assert out["error"]["kind"] == "python_error"
    assert "not JSON-serializable" in out["error"]["message"]
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
