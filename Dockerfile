# The agentpool image: the supervisor (console script `agentpool`) as the
# entrypoint. Build from the repository root:  docker build -t agentpool:0.1.0 .
#
# Two stages: the builder installs the dependencies from the hash-checked lock
# and then the package into a virtualenv (pip talks to the package index and
# nothing else, and installs nothing that is not pinned with a hash); the final
# stage copies only that virtualenv onto a clean slim Python, so no build
# tooling, pip or pip cache ships.
#
# Python 3.12, not 3.11: there the fork server makes its heap immortal (PEP 683)
# before forking the workers, so a worker no longer copies every shared page it
# reads to count a reference: ~2.5 instead of ~5 MiB per node (BENCHMARKS.md,
# memory.py). The locks hold wheels for both.

FROM python:3.12-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# Without pip: the base image's pip installs into it (pip --python), so neither pip
# nor setuptools ends up in what ships.
RUN python -m venv --without-pip /opt/agentpool

WORKDIR /src
# EXTRAS=[sim] adds the simulation kit and the demo (the power simulator of docs/deploy.md
# and of the end-to-end suite), EXTRAS=[nvidia,amd] the GPU vendors' bindings (docs/deploy.md).
ARG EXTRAS=""
# The dependencies first, pinned with hashes (refresh: bash scripts/lock): runtime.txt
# holds the runtime and sim dependencies, gpu.txt those plus the GPU bindings, build.txt
# setuptools (setup.py's backend) for this stage only. This layer is rebuilt only when a
# lock or EXTRAS changes.
COPY requirements/runtime.txt requirements/gpu.txt requirements/build.txt ./requirements/
RUN lock=requirements/runtime.txt; \
    case "${EXTRAS}" in *nvidia*|*amd*) lock=requirements/gpu.txt ;; esac; \
    pip install --no-cache-dir --require-hashes -r requirements/build.txt \
    && pip --python /opt/agentpool/bin/python install --no-cache-dir --require-hashes -r "${lock}"
# Only what the install needs (see .dockerignore): the package and its metadata. The
# simulation kit and the demo (agentpool/sim, agentpool/demo; the agent never imports
# them) ship only when EXTRAS names sim. The wheel is built with the pinned setuptools
# above, without build isolation (which would download setuptools unpinned), and
# installed without resolving anything: the lock already holds every dependency. EXTRAS
# chose the lock; with --no-deps the wheel's own extras add nothing.
COPY setup.py setup.cfg README.md ./
COPY agentpool ./agentpool
RUN case "${EXTRAS}" in *sim*) ;; *) rm -r agentpool/sim agentpool/demo ;; esac \
    && pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /tmp/wheels . \
    && pip --python /opt/agentpool/bin/python install --no-cache-dir --no-deps --no-index \
        /tmp/wheels/agentpool-*.whl


FROM python:3.12-slim-bookworm

# Same base image as the builder, so the venv's python symlink resolves.
COPY --from=builder /opt/agentpool /opt/agentpool

ENV PATH=/opt/agentpool/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PROMETHEUS_MULTIPROC_DIR=/var/run/agentpool/metrics \
    STATE_DIR=/var/lib/agentpool/state

# Unprivileged by default (uid/gid 65532). The chart's DaemonSet overrides to
# root + privileged because it writes the host's sysfs; the pool StatefulSet
# keeps this user. The metrics and state directories are normally emptyDir
# mounts; they exist here too so `docker run` works without them.
#
# The slim base image ships the standard library without bytecode, and the root
# filesystem is read-only in the chart (and PYTHONDONTWRITEBYTECODE is set), so
# without this every start would compile each standard module it imports again
# (BENCHMARKS.md: container start).
RUN python -m compileall -q -j 0 /usr/local/lib/python3.12 \
    && groupadd --system --gid 65532 agentpool \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin agentpool \
    && mkdir -p /var/run/agentpool/metrics /var/lib/agentpool/state \
    && chown 65532:65532 /var/run/agentpool/metrics /var/lib/agentpool/state

USER 65532:65532

# METRICS_ADDR (:8080): /metrics, /healthz, /readyz.
EXPOSE 8080

# No init (tini): the supervisor is written to be PID 1. It handles SIGTERM
# itself (restores host values, stops workers) and reaps every child,
# including orphans it did not start. No HEALTHCHECK: Kubernetes probes
# /healthz and /readyz.
ENTRYPOINT ["agentpool"]
