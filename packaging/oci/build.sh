#!/usr/bin/env bash
# Builds Sluice's container image with buildah, from nothing (no base image is pulled):
#   packaging/oci/build.sh [--binary PATH] [--tag NAME] [--archive FILE]
#
# The image holds the binary (debug information stripped), the shared libraries it links
# (glibc's, libgcc_s), the CA certificates (for TLS to upstreams), /etc/passwd and /etc/group
# with a `sluice` user (uid 10001, which it runs as), and packaging/oci/sluice.yaml as
# /etc/sluice/sluice.yaml. Ports 9080 (proxy) and 9091 (status); a health check that runs
# `sluice health` (GET /healthz) every 10 s. Docker's image format, since OCI's has no field
# for a health check; podman, Docker and Kubernetes all run it.
# Without --binary, builds the release binary first. --archive writes the image to a
# docker-archive tar too (podman load / docker load). Prints the image's name.
set -euo pipefail
# Docker's format from the start: `buildah config` drops a health check otherwise.
export BUILDAH_FORMAT=docker
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN=""
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
TAG="localhost/sluice:$VERSION"
ARCHIVE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BIN=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --archive) ARCHIVE=$2; shift 2 ;;
    *) echo "build.sh: unknown option $1 (--binary PATH, --tag NAME, --archive FILE)" >&2; exit 2 ;;
  esac
done
for tool in buildah objcopy ldd; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is needed (apt-get install buildah binutils)" >&2; exit 1; }
done
if [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build --release --locked -p sluice)
  BIN="$ROOT/target/release/sluice"
fi
[ -x "$BIN" ] || { echo "build.sh: $BIN is not an executable" >&2; exit 1; }

STAGE=$(mktemp -d)
CTR=""
cleanup() {
  [ -n "$CTR" ] && buildah rm "$CTR" >/dev/null 2>&1
  rm -rf "$STAGE"
}
trap cleanup EXIT

# The root file system, staged, then copied in as one layer.
R="$STAGE/root"
install -D -m 0755 "$BIN" "$R/usr/bin/sluice"
objcopy --strip-debug "$R/usr/bin/sluice"
for lib in $(ldd "$BIN" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do
  install -D -m 0755 "$(readlink -f "$lib")" "$R$lib"
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
install -D -m 0644 "$HERE/sluice.yaml" "$R/etc/sluice/sluice.yaml"
printf 'root:x:0:0:root:/root:/sbin/nologin\nsluice:x:10001:10001:Sluice API gateway:/var/lib/sluice:/sbin/nologin\n' > "$R/etc/passwd"
printf 'root:x:0:\nsluice:x:10001:\n' > "$R/etc/group"
install -d -m 1777 "$R/tmp"
install -d -m 0755 "$R/var/lib/sluice" "$R/var/log/sluice"

CTR=$(buildah from scratch)
buildah copy --quiet "$CTR" "$R" / >/dev/null
buildah config \
  --user 10001:10001 \
  --workingdir /var/lib/sluice \
  --port 9080/tcp --port 9091/tcp \
  --env SLUICE_CONFIG=/etc/sluice/sluice.yaml \
  --entrypoint '["/usr/bin/sluice"]' \
  --cmd 'run' \
  --healthcheck 'CMD /usr/bin/sluice health 127.0.0.1:9091' \
  --healthcheck-interval 10s --healthcheck-timeout 5s --healthcheck-retries 3 \
  --healthcheck-start-period 5s \
  --label org.opencontainers.image.title=sluice \
  --label "org.opencontainers.image.version=$VERSION" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$CTR"
buildah commit --quiet --format docker --rm "$CTR" "$TAG" >/dev/null
CTR=""
if [ -n "$ARCHIVE" ]; then
  rm -f "$ARCHIVE"
  buildah push --quiet "$TAG" "docker-archive:$ARCHIVE:$TAG" >/dev/null
fi
echo "$TAG"
