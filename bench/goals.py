"""The issue's goals as checks on a run's medians; relative goals use the floor of the same run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.record import Recorder

Getter = Callable[[Recorder], float | None]


@dataclass
class Goal:
    text: str
    measured: Getter
    target: Getter
    higher_is_better: bool
    unit: str

    def check(self, rec: Recorder) -> tuple[float | None, float | None, bool | None]:
        got, want = self.measured(rec), self.target(rec)
        if got is None or want is None:
            return got, want, None
        return got, want, (got >= want) if self.higher_is_better else (got <= want)


def _m(scenario: str, name: str) -> Getter:
    return lambda rec: rec.median(scenario, name)


def _const(value: float) -> Getter:
    return lambda rec: value


def _times_floor(factor: float) -> Getter:
    def get(rec: Recorder) -> float | None:
        p50 = rec.median("floor", "hop_p50")
        return None if p50 is None else factor * p50

    return get


def _max_rss(rec: Recorder) -> float | None:
    vals = [  # our processes (not a peer's), in the scenarios of issue 9's goal (not the million loop)
        m.median
        for (sc, name), m in rec.metrics.items()
        if name.endswith("_rss") and m.values and sc != "million" and not name.startswith("restate_")
    ]
    return max(vals) if vals else None


def _rss_growth(rec: Recorder) -> float | None:
    """Peak worker/server RSS of the 10x larger parallel loop minus the smaller one's."""
    diffs = []
    for role in ("server", "worker"):
        big, small = rec.median("loop", f"par64_{role}_rss"), rec.median("loop", f"par64_small_{role}_rss")
        if big is not None and small is not None:
            diffs.append(big - small)
    return max(diffs) if diffs else None


def _floor_share(metric: str, share: float, sequential: bool = False) -> Getter:
    """``share`` of the floor's rate: its pipelined hops/s at 64 in flight, or, ``sequential``,
    one hop after another (1 000 / hop p50 in ms)."""

    def get(rec: Recorder) -> float | None:
        v = rec.median("floor", metric)
        if v is None or not v:
            return None
        return share * (1000.0 / v if sequential else v)

    return get


def _times(scenario: str, name: str, factor: float) -> Getter:
    def get(rec: Recorder) -> float | None:
        v = rec.median(scenario, name)
        return None if v is None else factor * v

    return get


def _million_rss(rec: Recorder) -> float | None:
    vals = [m.median for (sc, name), m in rec.metrics.items() if sc == "million" and name.endswith("_rss")]
    return max(vals) if vals else None


def _million_bytes(rec: Recorder) -> float | None:
    vals = [
        v
        for label in ("dist", "local")
        if (v := rec.median("million", f"{label}_event_bytes_per_element")) is not None
    ]
    return max(vals) if vals else None


# issue 29: "A 1 000 000-element loop wrote 214 MB of events" (one noop task per iteration)
EVENT_BYTES_PER_ELEMENT_BEFORE = 214.0


def _ttl_plus(seconds: float) -> Getter:
    """The ``ha`` scenario's lease TTL (read from the bucket in the same run) plus ``seconds``."""

    def get(rec: Recorder) -> float | None:
        ttl = rec.median("ha", "lease_ttl")
        return None if ttl is None else ttl + seconds

    return get


def _peer_ratio(ours: tuple[str, str], peer: str, metric: str, higher: bool) -> Getter:
    """How many times better ours is than the peer's (> 1 means ahead)."""

    def get(rec: Recorder) -> float | None:
        a, b = rec.median(*ours), rec.median("peers", f"{peer}_{metric}")
        if a is None or b is None or not a or not b:
            return None
        return a / b if higher else b / a

    return get


GOALS: list[Goal] = [
    Goal(
        "chain: ms per step ≤ 3.5 x floor hop p50", _m("chain", "ms_per_step"), _times_floor(3.5), False, "ms"
    ),
    Goal(
        "chain: ms per step ≤ 2.5 ms (the issue's absolute figure)",
        _m("chain", "ms_per_step"),
        _const(2.5),
        False,
        "ms",
    ),
    Goal("chain: step p99 ≤ 10 ms", _m("chain", "step_p99"), _const(10.0), False, "ms"),
    Goal(
        "loop: ≥ 2 000 iterations/s, max_in_flight 64, snapshot per iteration",
        _m("loop", "par64_iter_per_s"),
        _const(2000.0),
        True,
        "it/s",
    ),
    Goal("fan-out: ≥ 2 000 steps/s", _m("fanout", "steps_per_s"), _const(2000.0), True, "steps/s"),
    Goal("sequential loop: ≥ 400 iterations/s", _m("loop", "seq_iter_per_s"), _const(400.0), True, "it/s"),
    Goal("one-step execution p50 ≤ 10 ms", _m("one_step", "p50"), _const(10.0), False, "ms"),
    Goal("≤ 150 MiB peak RSS per server or worker process", _max_rss, _const(150.0), False, "MiB"),
    Goal("peak RSS flat in loop size (10x iterations: ≤ +10 MiB)", _rss_growth, _const(10.0), False, "MiB"),
    Goal(
        "ha: a killed server replica's partitions taken over ≤ lease TTL + 4 s",
        _m("ha", "takeover_s"),
        _ttl_plus(4.0),
        False,
        "s",
    ),
]
GOALS += [  # issue 29: ratios to the floor of the same run
    Goal(
        "29: chain ms per step ≤ 1.2 x floor hop p50",
        _m("chain", "ms_per_step"),
        _times_floor(1.2),
        False,
        "ms",
    ),
    Goal(
        "29: sequential loop ≥ 85 % of the floor's sequential hop rate",
        _m("loop", "seq_iter_per_s"),
        _floor_share("hop_p50", 0.85, sequential=True),
        True,
        "it/s",
    ),
    Goal(
        "29: parallel loop (64 in flight) ≥ 70 % of the floor's pipelined hop rate",
        _m("loop", "par64_iter_per_s"),
        _floor_share("hops_per_s_64_in_flight", 0.70),
        True,
        "it/s",
    ),
    Goal(
        "29: fan-out of 1 000 three-step executions ≥ 60 % of the floor's pipelined hop rate",
        _m("fanout", "steps_per_s"),
        _floor_share("hops_per_s_64_in_flight", 0.60),
        True,
        "steps/s",
    ),
    Goal(
        "29: 50 x 20-step executions ≥ 60 % of the floor's pipelined hop rate",
        _m("shapes", "noetl_conc_steps_per_s"),
        _floor_share("hops_per_s_64_in_flight", 0.60),
        True,
        "steps/s",
    ),
    Goal(
        "29: exec: local loop of 100 000 noop iterations ≥ 50 000 it/s",
        _m("loop", "tiny_local_iter_per_s"),
        _const(50_000.0),
        True,
        "it/s",
    ),
    Goal(
        "29: http loop, 64 in flight (distributed) ≥ 90 % of raw httpx.AsyncClient",
        _m("io_loops", "http_dist_per_s"),
        _times("io_loops", "http_raw_per_s", 0.9),
        True,
        "req/s",
    ),
    Goal(
        "29: http loop, 64 in flight (exec: local) ≥ 90 % of raw httpx.AsyncClient",
        _m("io_loops", "http_local_per_s"),
        _times("io_loops", "http_raw_per_s", 0.9),
        True,
        "req/s",
    ),
    Goal(
        "29: postgres insert loop, 16 in flight (distributed) ≥ 70 % of raw asyncpg, pool of 16",
        _m("io_loops", "pg_dist_per_s"),
        _times("io_loops", "pg_raw_per_s", 0.7),
        True,
        "rows/s",
    ),
    Goal(
        "29: postgres insert loop, 16 in flight (exec: local) ≥ 70 % of raw asyncpg, pool of 16",
        _m("io_loops", "pg_local_per_s"),
        _times("io_loops", "pg_raw_per_s", 0.7),
        True,
        "rows/s",
    ),
    Goal(
        "29: noetl run of one step ≤ 1.5 x its floor (nats-server + nats-py publish)",
        _m("startup", "noetl_run_wall"),
        _times("startup", "floor_wall", 1.5),
        False,
        "ms",
    ),
    Goal(
        "29: 1 000 000-element loop: peak RSS per process ≤ 200 MiB",
        _million_rss,
        _const(200.0),
        False,
        "MiB",
    ),
    Goal(
        "29: 1 000 000-element loop: event bytes per element ≤ 1/3 of 214",
        _million_bytes,
        _const(EVENT_BYTES_PER_ELEMENT_BEFORE / 3),
        False,
        "B",
    ),
]
for _peer in ("temporal", "prefect"):
    GOALS += [
        Goal(
            f"ahead of {_peer}: chain (x faster per step)",
            _peer_ratio(("chain", "ms_per_step"), _peer, "chain_ms_per_step", False),
            _const(1.0),
            True,
            "x",
        ),
        Goal(
            f"ahead of {_peer}: loop (x our iterations/s at max_in_flight 64 over its parallel activities/s)",
            _peer_ratio(("loop", "par64_iter_per_s"), _peer, "loop_per_s", True),
            _const(1.0),
            True,
            "x",
        ),
        Goal(
            f"ahead of {_peer}: fan-out (x our steps/s over its steps/s, concurrent 3-step runs)",
            _peer_ratio(("fanout", "steps_per_s"), _peer, "fanout_steps_per_s", True),
            _const(1.0),
            True,
            "x",
        ),
    ]


def _ahead_of_restate(metric: str, higher: bool) -> Getter:
    """Ours over the faster of Restate's two SDKs on one of issue 29's shapes (> 1: ahead)."""

    def get(rec: Recorder) -> float | None:
        ours = rec.median("shapes", f"noetl_{metric}")
        theirs = [v for sdk in ("ts", "py") if (v := rec.median("shapes", f"restate_{sdk}_{metric}"))]
        if not ours or not theirs:
            return None
        best = max(theirs) if higher else min(theirs)
        return ours / best if higher else best / ours

    return get


for _metric, _text, _higher in (
    ("chain_ms_per_step", "chain of 50 steps (x faster per step)", False),
    ("loop_steps_per_s", "1 000 steps, 50 in flight (x steps/s)", True),
    ("one_step_p50", "one-step workflow (x lower p50)", False),
    ("conc_steps_per_s", "50 x 20-step workflows at once (x steps/s)", True),
    ("burst_exec_per_s", "200 three-step workflows at once (x workflows/s)", True),
):
    GOALS.append(
        Goal(
            f"vs restate, its faster SDK: {_text}",
            _ahead_of_restate(_metric, _higher),
            _const(1.0),
            True,
            "x",
        )
    )
