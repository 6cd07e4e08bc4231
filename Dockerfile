# gpuops: `gpuops serve` (HTTP mode) as a non-root user; the policy is mounted as a file.
#
#   docker build -t gpuops .
#   docker run -p 3000:3000 --env-file gpuops.env \
#     -v "$PWD/policy.yml:/etc/gpuops/policy.yml:ro" gpuops
#
# BASE_IMAGE is any Debian-like image with python3 (>= 3.11) and its venv module.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
# A CA bundle for pip (a TLS-inspecting proxy's CA can be mounted and named here).
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
# uv turns the lock into pip's requirements (exact versions with their hashes); it runs in
# this stage only. Keep it at the Makefile's UV_VERSION.
ARG UV_VERSION=0.13.9
WORKDIR /src
# The dependencies first, in their own layer: a change to the code alone reuses it. They are
# uv.lock's, exactly (the server's: no extras, no groups, so nothing of the `local` group's
# gpuops-local): pip checks every file's hash and installs nothing the lock does not name
# (--no-deps).
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --cert "$PIP_CERT" "uv==$UV_VERSION" \
    && /opt/uv/bin/uv export --frozen --no-dev --no-emit-workspace --format requirements-txt \
      --output-file /tmp/requirements.txt >/dev/null \
    && python3 -m venv /opt/gpuops \
    && /opt/gpuops/bin/pip install --cert "$PIP_CERT" --require-hashes --no-deps \
      -r /tmp/requirements.txt
COPY README.md LICENSE ./
# The build context has no bot/local (.dockerignore): the simulators, the Slack stand-in and
# the demo are the gpuops-local distribution (bot/local/pyproject.toml), which a server
# never installs; the gpuops wheel leaves them out too.
COPY bot ./bot
COPY handlers ./handlers
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/gpuops/bin/pip install --cert "$PIP_CERT" --no-deps . \
    && /opt/gpuops/bin/python -m compileall -q /opt/gpuops/lib

FROM ${BASE_IMAGE}
RUN groupadd --gid 10001 gpuops \
    && useradd --no-log-init --uid 10001 --gid 10001 --home-dir /var/lib/gpuops --create-home \
      --shell /usr/sbin/nologin gpuops
COPY --from=build /opt/gpuops /opt/gpuops
ENV PATH=/opt/gpuops/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GPUOPS_POLICY=/etc/gpuops/policy.yml \
    GPUOPS_PORT=3000
WORKDIR /var/lib/gpuops
USER 10001:10001
EXPOSE 3000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('GPUOPS_PORT', '3000'), timeout=4)"]
ENTRYPOINT ["gpuops"]
CMD ["serve"]
