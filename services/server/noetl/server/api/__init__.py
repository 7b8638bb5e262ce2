"""Operations surface of the control plane: the HTTP API, the NATS service ``noetl``, metrics.

Everything here reads the same streams and buckets the engine writes and starts executions
through the same ``RequestHandler`` as ``noetl.requests.execute``; none of it decides anything.
"""

from noetl.server.api.micro import NatsApiService
from noetl.server.api.server import ApiServer

__all__ = ["ApiServer", "NatsApiService"]
