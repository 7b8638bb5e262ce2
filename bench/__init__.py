"""Benchmarks of the engine on a real nats-server, against the raw JetStream floor and two peers.

Run ``python -m bench`` from the repository root (see ``docs/performance.md``). Every scenario
starts what it measures itself (nats-server, ``noetl server`` and ``noetl worker`` processes) and
stops it, so a run needs nothing but the virtual environment.
"""
