# syntax=docker/dockerfile:1
# Build: docker build -t dra-extender:0.1.0 .
# Stage 1 installs the project and its runtime dependencies (no test extras) into a venv;
# stage 2 copies only that venv onto a clean slim image, without pip caches or build tools.
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY extender ./extender
RUN python -m venv /opt/dra-extender \
 && /opt/dra-extender/bin/pip install .

FROM python:3.11-slim-bookworm
# The root filesystem is read-only in the cluster: never try to write .pyc files.
ENV PATH=/opt/dra-extender/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 dra \
 && useradd --system --uid 10001 --gid dra --no-create-home --shell /usr/sbin/nologin dra
COPY --from=build /opt/dra-extender /opt/dra-extender
USER 10001:10001
EXPOSE 8888
ENTRYPOINT ["dra-extender"]
CMD ["serve", "--kube", "--host", "0.0.0.0"]
