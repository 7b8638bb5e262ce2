# The noetl image: one image for the server and the workers (deploy/helm/noetl runs both).
#   docker build -t noetl-jetstream:0.2.0 .
#   docker build --build-arg EXTRAS=nkeys -t noetl-jetstream-slim:0.2.0 .   # no DuckDB, no asyncpg
#   docker run --rm noetl-jetstream:0.2.0 --help
# Its packages are requirements.lock's (scripts/lock.sh writes it from pyproject.toml).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the wheel is built from; .dockerignore keeps the rest of the tree out.
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY libs ./libs
COPY services ./services
# The extras the image carries: postgres (asyncpg), duckdb, nkeys (.creds auth), otlp (traces).
ARG EXTRAS=all
# requirements.lock (scripts/lock.sh) pins every dependency of `all` with hashes: the default image
# installs exactly it, each file checked against its hash; other EXTRAS take the lock's versions as
# constraints (what they leave out is not installed).
RUN if [ "$EXTRAS" = all ]; then \
      pip install --require-hashes --no-deps -r requirements.lock && pip install --no-deps ".[${EXTRAS}]"; \
    else \
      sed -e '/--hash=/d' -e 's/ *\\$//' requirements.lock > /tmp/constraints.txt \
      && pip install -c /tmp/constraints.txt ".[${EXTRAS}]"; \
    fi \
    && pip check && rm -rf /src /tmp/constraints.txt

# A fixed numeric uid, so Kubernetes can verify runAsNonRoot (the chart runs it as 10001).
RUN groupadd --system --gid 10001 noetl \
    && useradd --system --uid 10001 --gid noetl --home-dir /home/noetl --create-home --shell /usr/sbin/nologin noetl
USER 10001:10001
WORKDIR /home/noetl

# The server's HTTP API (--http-port): /health, /ready, /metrics; a worker's probes and /metrics
# (noetl worker --http-port 9090, as the chart runs it).
EXPOSE 8080 9090
ENTRYPOINT ["noetl"]
CMD ["server"]
