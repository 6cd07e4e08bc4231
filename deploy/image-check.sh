#!/usr/bin/env bash
# `make image-check`: build the gpuops image from the Dockerfile and run it here.
#
# No registry of base images is reachable from these machines, so the base is a minimal
# Debian made with debootstrap (from Debian's package mirror) and imported into podman;
# pip reaches PyPI through this machine's TLS proxy, whose CA is mounted into the build.
# The base image, its tarball, podman's layers and pip's cache are kept between runs (in
# $GPUOPS_IMAGE_CACHE and podman's own storage), so a run after a code change rebuilds only
# the gpuops layer. Then tests/image/check_image.py starts the image against the simulators
# and the Slack stand-in on the host. Needs root (podman as root, apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${GPUOPS_IMAGE_CACHE:-/var/cache/gpuops}
SUITE=bookworm
BASE=localhost/gpuops-base:$SUITE
IMAGE=${GPUOPS_IMAGE:-localhost/gpuops:check}
HOST_CA=/etc/ssl/certs/ca-certificates.crt
PYTHON=${PYTHON:-.venv/bin/python}

say() { printf 'image-check: %s\n' "$*"; }

if [[ $(id -u) -ne 0 ]]; then
  say "needs root (podman runs as root here, and missing tools come from apt-get)" >&2
  exit 1
fi
mkdir -p "$CACHE"

install_tools() {
  local missing=()
  for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
}

# podman's defaults need systemd and settable ulimits, which this sandbox does not have.
containers_conf() {
  export CONTAINERS_CONF="$CACHE/containers.conf"
  cat >"$CONTAINERS_CONF" <<'CONF'
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF
}

base_image() {
  if podman image exists "$BASE"; then
    return
  fi
  local tarball="$CACHE/debian-$SUITE-minbase.tar"
  if [[ ! -s $tarball ]]; then
    local root
    root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    say "making a minimal Debian $SUITE base with debootstrap (once; cached in $CACHE)"
    if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      "$SUITE" "$root" >"$CACHE/debootstrap.log" 2>&1; then
      tail -n 20 "$CACHE/debootstrap.log" >&2
      rm -rf "$root"
      exit 1
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
      "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
    tar -C "$root" -cf "$tarball.partial" . && mv "$tarball.partial" "$tarball"
    rm -rf "$root"
  fi
  podman import --quiet "$tarball" "$BASE" >/dev/null
}

build_image() {
  say "building $IMAGE from the Dockerfile on $BASE"
  podman build --quiet --format docker --network host \
    --volume "$HOST_CA:/run/host-ca.crt:ro" \
    --build-arg "BASE_IMAGE=$BASE" --build-arg PIP_CERT=/run/host-ca.crt \
    --tag "$IMAGE" . >/dev/null
  # Layers of earlier builds that nothing uses any more (the cache keeps the current ones).
  podman image prune --force --filter until=72h >/dev/null || true
}

started=$SECONDS
install_tools
containers_conf
base_image
build_image
say "built in $((SECONDS - started)) s; running it"
GPUOPS_IMAGE=$IMAGE "$PYTHON" -m pytest -q -p no:cacheprovider tests/image/check_image.py
