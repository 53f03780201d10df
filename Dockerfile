# syntax=docker/dockerfile:1
#
# hami-py: `hami serve`, the webhook and scheduler extender that helm/hami deploys.
#
#   docker build -t <registry>/hami-py:0.1.0 .
#   helm install hami-py ./helm/hami --set image.repository=<registry>/hami-py
#
# The image runs as uid/gid 65532 with a read-only root filesystem: at run time the process
# writes only to /tmp (a short-lived file while OpenSSL loads a key) and to the folder given by
# --cert-dir (the chart mounts in-memory emptyDirs at both).

ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: build the wheel, install it and its dependencies into a venv -----------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the wheel is built from (see .dockerignore); tests and the chart stay out.
COPY pyproject.toml README.md ./
COPY hami ./hami
COPY webhook ./webhook
COPY scheduler ./scheduler
COPY certs ./certs
# Bytecode is compiled here, since nothing may write it at run time; the installers then go.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/hami \
 && /opt/hami/bin/pip install /wheels/*.whl \
 && /opt/hami/bin/python -m compileall -q /opt/hami/lib \
 && /opt/hami/bin/pip uninstall -y pip setuptools \
 && /opt/hami/bin/hami serve --help > /dev/null

# --- runtime ----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="hami-py" \
      org.opencontainers.image.description="GPU-sharing scheduler: mutating webhook and kube-scheduler extender, HAMi v2.10 compatible" \
      org.opencontainers.image.licenses="Apache-2.0"
# Same base image as the builder, so the venv's interpreter links resolve unchanged.
COPY --from=builder /opt/hami /opt/hami
ENV PATH=/opt/hami/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
USER 65532:65532
WORKDIR /
# 9443: HTTPS (/webhook, /filter, /bind, /healthz, /readyz); 9395: /metrics.
EXPOSE 9443 9395
ENTRYPOINT ["hami", "serve"]
