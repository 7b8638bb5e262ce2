# The noetl image: one image for the server and the workers (deploy/helm/noetl runs both).
#   docker build -t noetl-jetstream:0.1.0 .
#   docker run --rm noetl-jetstream:0.1.0 --help
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the wheel is built from; .dockerignore keeps the rest of the tree out.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
RUN pip install . && rm -rf /src

# A fixed numeric uid, so Kubernetes can verify runAsNonRoot (the chart runs it as 10001).
RUN groupadd --system --gid 10001 noetl \
    && useradd --system --uid 10001 --gid noetl --home-dir /home/noetl --create-home --shell /usr/sbin/nologin noetl
USER 10001:10001
WORKDIR /home/noetl

# The server's HTTP API (--http-port): /health, /ready, /metrics.
EXPOSE 8080
ENTRYPOINT ["noetl"]
CMD ["server"]
