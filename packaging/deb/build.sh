#!/usr/bin/env bash
# Builds the Debian package: packaging/deb/build.sh [--binary PATH] [--out DIR] [--fast]
#
# Without --binary, builds the release binary first (cargo build --release). The package
# (target/debian/sluice_<version>_<arch>.deb by default) holds:
#   /usr/bin/sluice
#   /etc/sluice/sluice.yaml                    the configuration (a conffile), this directory's
#   /lib/systemd/system/sluice.service         packaging/systemd/sluice.service
#   /etc/logrotate.d/sluice                    the access log, daily, reopened on SIGUSR1
#   /usr/share/man/man1/sluice*.1.gz           from the CLI (`sluice man --dir`)
#   /usr/share/bash-completion/completions/sluice, zsh's and fish's   (`sluice completions`)
#   /usr/share/doc/sluice/                     copyright, README.md and docs/*.md
# postinst adds the `sluice` system user and enables and starts the service under systemd;
# purge removes the user, /var/lib/sluice, /var/log/sluice and /etc/sluice.
# Needs dpkg-deb (Debian's dpkg) only: no debhelper, no cargo-deb.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN=""
OUT="$ROOT/target/debian"
# xz at its default level: the smallest package, about 30 s of two cores for the binary.
# --fast (the tests): gzip at level 1.
COMPRESS=(-Zxz)
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --fast) COMPRESS=(-Zgzip -z1); shift ;;
    *) echo "build.sh: unknown option $1 (--binary PATH, --out DIR, --fast)" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build --release --locked -p sluice)
  BIN="$ROOT/target/release/sluice"
fi
[ -x "$BIN" ] || { echo "build.sh: $BIN is not an executable" >&2; exit 1; }
for tool in dpkg-deb objcopy objdump; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is needed (Debian's dpkg and binutils)" >&2; exit 1; }
done

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
ARCH=$(dpkg --print-architecture)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
P="$STAGE/sluice_${VERSION}_$ARCH"

install -D -m 0755 "$BIN" "$P/usr/bin/sluice"
# Debug information stays out of the package (the release profile keeps it for profiling).
objcopy --strip-debug "$P/usr/bin/sluice"
install -D -m 0640 "$HERE/sluice.yaml" "$P/etc/sluice/sluice.yaml"
install -D -m 0644 "$HERE/logrotate" "$P/etc/logrotate.d/sluice"
install -D -m 0644 "$ROOT/packaging/systemd/sluice.service" "$P/lib/systemd/system/sluice.service"

"$P/usr/bin/sluice" man --dir "$P/usr/share/man/man1"
gzip -9n "$P"/usr/share/man/man1/*.1
install -d "$P/usr/share/bash-completion/completions" "$P/usr/share/zsh/vendor-completions" \
  "$P/usr/share/fish/vendor_completions.d"
"$P/usr/bin/sluice" completions bash > "$P/usr/share/bash-completion/completions/sluice"
"$P/usr/bin/sluice" completions zsh > "$P/usr/share/zsh/vendor-completions/_sluice"
"$P/usr/bin/sluice" completions fish > "$P/usr/share/fish/vendor_completions.d/sluice.fish"

DOC="$P/usr/share/doc/sluice"
install -d "$DOC"
install -m 0644 "$ROOT/README.md" "$ROOT"/docs/*.md "$DOC/"
cat > "$DOC/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: sluice
Files: *
License: $(sed -n 's/^license = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
COPY

install -d "$P/DEBIAN"
install -m 0755 "$HERE/postinst" "$HERE/prerm" "$HERE/postrm" "$P/DEBIAN/"
printf '%s\n' /etc/sluice/sluice.yaml /etc/logrotate.d/sluice > "$P/DEBIAN/conffiles"
SIZE=$(du -sk --exclude=DEBIAN "$P" | cut -f1)
# The newest glibc symbol version the binary uses is the libc6 it needs.
GLIBC=$(objdump -T "$P/usr/bin/sluice" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
PLUGINS=$("$P/usr/bin/sluice" plugins | grep -o '"name"' | wc -l)
cat > "$P/DEBIAN/control" <<CONTROL
Package: sluice
Version: $VERSION
Architecture: $ARCH
Maintainer: Sluice developers <sluice@localhost>
Installed-Size: $SIZE
Depends: libc6 (>= $GLIBC), libgcc-s1, adduser
Recommends: logrotate
Section: net
Priority: optional
Description: fast API gateway in one binary
 Sluice proxies HTTP (HTTP/1.1, HTTP/2, gRPC, WebSocket) and TCP traffic to load-balanced
 upstreams, with one event loop per core. Routes, upstreams, consumers and $PLUGINS
 plugins (auth, limits, rewrites, observability, AI) come from a YAML file or an admin
 REST API compatible with Apache APISIX's, live, and can be shared through etcd.
CONTROL

mkdir -p "$OUT"
DEB="$OUT/sluice_${VERSION}_$ARCH.deb"
dpkg-deb --root-owner-group "${COMPRESS[@]}" --build "$P" "$DEB" >/dev/null
echo "$DEB"
