"""What every process needs from its host: structured logging and a local nats-server for the
embedded mode and the tests. Neither is part of the wire contract (``noetl.events``)."""
