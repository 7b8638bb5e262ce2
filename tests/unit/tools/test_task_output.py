"""Issue 19: what a task run prints or logs is its own, capped and masked.

Task runs share one process: concurrent asyncio tasks and python tasks in threads. The capture is
keyed on a context variable, so two runs at once must never see each other's lines.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

import pytest

from noetl.events.masking import Masker
from noetl.worker.output import MAX_OUTPUT_BYTES, TaskOutput, capturing, current, install
from noetl.worker.tools import get_tool
from tests.unit.tools.helpers import make_ctx


async def _python(code: str, args: dict[str, object] | None = None) -> dict[str, object]:
    return await get_tool("python").run({"code": code, "args": args or {}}, make_ctx())


async def test_two_concurrent_python_tasks_do_not_mix_their_output() -> None:
    code = (
        "import sys, time\n"
        "def main(who):\n"
        "    for i in range(20):\n"
        "        print(who, i)\n"
        "        sys.stdout.write(f'{who} out {i}\\n')\n"
        "        time.sleep(0.002)\n"
        "    return who\n"
    )

    async def one(who: str) -> tuple[str, str]:
        with capturing() as out:
            got = await _python(code, {"who": who})
            assert got["result"] == who
        return who, out.render()

    results = await asyncio.gather(one("alpha"), one("beta"), one("gamma"))
    for who, text in results:
        lines = text.splitlines()
        assert len(lines) == 40, text
        assert all(line.startswith(who + " ") for line in lines), text
        assert f"{who} 19" in lines and f"{who} out 19" in lines


async def test_asyncio_tasks_and_to_thread_write_to_their_own_run() -> None:
    release = asyncio.Event()

    async def run(who: str) -> str:
        with capturing() as out:
            print(f"{who} before")
            await release.wait()  # the other run prints while this one waits
            await asyncio.to_thread(print, f"{who} in a thread")
            logging.getLogger("etl.job").warning("%s logged", who)
        return out.render()

    first = asyncio.create_task(run("one"))
    second = asyncio.create_task(run("two"))
    await asyncio.sleep(0.01)
    release.set()
    a, b = await asyncio.gather(first, second)
    assert a == "one before\none in a thread\nWARNING etl.job: one logged\n"
    assert b == "two before\ntwo in a thread\nWARNING etl.job: two logged\n"


async def test_outside_a_capture_output_goes_to_the_real_stream(capsys: pytest.CaptureFixture[str]) -> None:
    install()
    print("plain")
    with capturing() as out:
        print("captured")
    print("plain again", file=sys.stderr)
    got = capsys.readouterr()
    assert got.out == "plain\n" and got.err == "plain again\n"
    assert out.render() == "captured\n"
    assert current() is None


def test_a_thread_started_without_the_context_is_not_captured(capsys: pytest.CaptureFixture[str]) -> None:
    with capturing() as out:
        t = threading.Thread(target=print, args=("from a bare thread",))
        t.start()
        t.join()
    assert out.render() == ""
    assert "from a bare thread" in capsys.readouterr().out


def test_the_engines_own_log_records_are_not_the_tasks() -> None:
    with capturing() as out:
        logging.getLogger("noetl.worker").warning("worker business")
        logging.getLogger("nats.aio.client").warning("client business")
        logging.getLogger("etl").error("the task's")
    assert out.render() == "ERROR etl: the task's\n"


def test_output_is_capped_with_a_marker() -> None:
    out = TaskOutput()
    line = "x" * 99 + "\n"
    for _ in range(2000):  # 200 000 bytes
        out.write(line)
    text = out.render()
    body, marker = text.rsplit("\n[output truncated: ", 1)
    assert len(body.encode()) <= MAX_OUTPUT_BYTES
    missing = 200_000 - MAX_OUTPUT_BYTES
    assert marker == f"{missing} more bytes not kept; the limit is {MAX_OUTPUT_BYTES} bytes]\n"
    small = TaskOutput(cap=10)
    small.write("héllo wörld, more")  # a cut inside a multi-byte character drops the character
    assert small.render().startswith("héllo wö")


def test_a_secret_is_masked_even_where_the_cap_cuts_it() -> None:
    secret = "Sup3r-" + "s" * 40
    masker = Masker({"db": {"password": secret}}, kinds={"db": "postgres_credential"})
    out = TaskOutput(cap=100)
    out.write("a" * 80 + secret + "b" * 100)  # the secret straddles the 100-byte cut
    text = out.render(masker.mask_text)
    assert secret[:10] not in text and "a" * 80 + "***" + "b" * 17 + "\n[output truncated" in text


async def test_a_secret_printed_by_a_python_task_is_masked() -> None:
    secret = "Pa55-" + "q" * 20
    masker = Masker({"api": {"token": secret}}, kinds={"api": "secret"})
    with capturing() as out:
        await _python("def main(t):\n    print('token is', t)\n", {"t": secret})
    text = out.render(masker.mask_text)
    assert secret not in text and text == "token is ***\n"


def test_install_points_a_logging_handler_at_the_real_stream() -> None:
    install()
    proxy = sys.stderr
    handler = logging.StreamHandler(proxy)  # what a logging set-up made after install would hold
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        install()
        assert handler.stream is not proxy and handler.stream is getattr(proxy, "_real", proxy)
    finally:
        root.removeHandler(handler)
