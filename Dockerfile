# The turnflow image: `turnflow consume`, `schedule`, `migrate`, ... (the chart picks the command).
# Multi-stage: the build stage installs the project into a virtualenv from the repository's
# files; the runtime stage copies only that virtualenv and the example agents, and runs as an
# unprivileged user whose uid the Helm chart's securityContext expects (10001).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/turnflow
WORKDIR /src
# Metadata first, so the dependency layer is cached until pyproject.toml changes.
COPY pyproject.toml README.md LICENSE ./
COPY engine ./engine
COPY store ./store
COPY consumer ./consumer
COPY migrations ./migrations
COPY replay ./replay
RUN /opt/turnflow/bin/pip install --no-compile . \
 && /opt/turnflow/bin/python -m compileall -q /opt/turnflow/lib

FROM ${PYTHON_IMAGE} AS runtime
# Bytecode is compiled at build time; the root filesystem is read-only at run time.
ENV PATH=/opt/turnflow/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    METRICS_PORT=9400
# One process per container, so every command serves on 9400 (the chart's metrics.port); on one
# machine without METRICS_PORT, consume, schedule and relay default to 9100, 9200 and 9300.
RUN groupadd --system --gid 10001 turnflow \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin turnflow
COPY --from=build /opt/turnflow /opt/turnflow
WORKDIR /app
# The demo agents, importable as AGENT=examples.demo_agent:agent; a real deployment builds
# FROM this image and adds its own agent module next to them.
COPY examples ./examples
USER 10001:10001
EXPOSE 9400
ENTRYPOINT ["turnflow"]
CMD ["consume"]
