# The dra-extender image: docs/deploy.md, "Build the image". No syntax directive: the builder's
# own Dockerfile frontend parses this file, so nothing is fetched for that.
# Stage 1 installs the locked dependencies (wheels only, every hash checked) and then the project
# without dependencies into a venv; stage 2 copies only that venv onto a clean slim image.
# The base is pinned to a patch release; pin its digest too with
# --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The dependencies first, in their own layer: a change to the code does not re-download them.
COPY requirements.lock ./
RUN python -m venv /opt/dra-extender \
 && /opt/dra-extender/bin/pip install --require-hashes --no-deps --only-binary=:all: --no-compile \
      -r requirements.lock
COPY pyproject.toml README.md ./
COPY extender ./extender
# setuptools comes from the lock (no build isolation, so nothing unpinned is fetched). Bytecode is
# compiled once here, keyed by source hashes rather than file times, so rebuilds give the same
# files and the read-only root filesystem never needs a .pyc written.
RUN /opt/dra-extender/bin/pip install --no-deps --no-build-isolation --no-compile . \
 && /opt/dra-extender/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/dra-extender/lib

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
# VERSION is pyproject.toml's version, which `dra-extender --version` and the
# dra_extender_build_info metric report; REVISION the git commit built.
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="dra-extender" \
      org.opencontainers.image.description="A kube-scheduler extender that allocates DRA devices" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
ENV PATH=/opt/dra-extender/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 dra \
 && useradd --system --uid 10001 --gid dra --no-create-home --shell /usr/sbin/nologin dra
COPY --from=build /opt/dra-extender /opt/dra-extender
USER 10001:10001
# The probe port (health and metrics); the scheduling API stays on the loopback.
EXPOSE 8889
ENTRYPOINT ["dra-extender"]
CMD ["serve", "--kube", "--host", "127.0.0.1", "--port", "8888", "--probe-port", "8889", "--no-leader-elect"]
