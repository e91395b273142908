#!/usr/bin/env bash
# The project's test command: installs what the tests need when it is missing, then runs
# every test of the workspace. Arguments go to `cargo test` (e.g. `./test.sh -p sluice-config`).
#
# The end-to-end tests start real servers and clients: etcd and Redis for the cluster tests,
# curl and h2load for TLS and HTTP/2, Prometheus (promtool and the server) for the metrics,
# Chromium, Node.js and playwright-core (npm) for the dashboard, Java and Maven for a Eureka
# server and a Kafka broker, Python's venv for moto (an AWS emulator from PyPI), Python's
# cryptography for the jwt-auth test's tokens, Go for an Open Policy Agent server and Helm,
# OpenLDAP's slapd for ldap-auth, rsyslog's rsyslogd for the syslog logger, systemd's
# systemd-analyze for the unit file, Node.js for APISIX's ADC CLI (third_party/adc) against the
# admin API, adduser and logrotate for the Debian package (which a test installs with `dpkg -i`
# and purges: the tests run as root, or with sudo), buildah and podman for the container
# image. They come from Debian's packages, installed here with apt-get (as root, or through
# sudo). Those who have them already can run `cargo test --workspace` directly.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo is required: install Rust from https://rustup.rs" >&2
  exit 1
fi

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
{ command -v cc && command -v make; } >/dev/null 2>&1 || need+=(build-essential)
command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v java >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
python3 -c 'import cryptography' >/dev/null 2>&1 || need+=(python3-cryptography)
{ command -v slapd || [ -x /usr/sbin/slapd ]; } >/dev/null 2>&1 || need+=(slapd)
{ command -v rsyslogd || [ -x /usr/sbin/rsyslogd ]; } >/dev/null 2>&1 || need+=(rsyslog)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
{ command -v logrotate || [ -x /usr/sbin/logrotate ]; } >/dev/null 2>&1 || need+=(logrotate)
{ command -v adduser || [ -x /usr/sbin/adduser ]; } >/dev/null 2>&1 || need+=(adduser)
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v podman >/dev/null 2>&1 || need+=(podman)
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: the tests need ${need[*]} (Debian package names); install them and run again" >&2
    exit 1
  fi
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "test.sh: the tests need ${need[*]}: run as root, or install them with apt-get" >&2
      exit 1
    fi
    sudo_cmd=(sudo)
  fi
  echo "test.sh: installing ${need[*]}" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The Eureka discovery test runs a real Eureka server (Spring Cloud Netflix), built here from
# its Maven project once (Maven Central; about 100 MB of dependencies in ~/.m2, 20 s).
eureka=crates/sluice/tests/eureka
if [ ! -f "$eureka/target/eureka-server.jar" ]; then
  echo "test.sh: building the Eureka server for the discovery test" >&2
  (cd "$eureka" && mvn -q -B package -DskipTests)
fi

# The kafka-logger test runs a real Apache Kafka broker (KRaft mode): its jars, from Maven
# Central, copied once under its Maven project (about 45 MB, 40 s).
kafka=crates/sluice/tests/kafka
if [ ! -f "$kafka/target/libs/kafka_2.13-4.1.1.jar" ]; then
  echo "test.sh: fetching Apache Kafka's jars for the kafka-logger test" >&2
  (cd "$kafka" && mvn -q -B dependency:copy-dependencies -DoutputDirectory=target/libs)
fi

# The AWS secret-manager test runs moto's server (an AWS emulator from PyPI), pinned, in a
# virtualenv of its own under target/ (about 60 MB, 20 s).
moto=target/tools/moto
if [ ! -x "$moto/bin/moto_server" ]; then
  echo "test.sh: installing moto's server for the secrets test" >&2
  python3 -m venv "$moto"
  "$moto/bin/pip" install -q -r crates/sluice/tests/moto-requirements.txt
fi

# The opa test runs a real Open Policy Agent server, built once from its Go module (the Go
# module proxy; OPA 1.22 needs Go 1.26, which Debian does not package: https://go.dev/dl/).
opa=target/tools/opa
if [ ! -x "$opa/opa" ]; then
  [ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
  if ! command -v go >/dev/null 2>&1; then
    echo "test.sh: the opa test needs Go 1.26 or later to build Open Policy Agent: install it from https://go.dev/dl/" >&2
    exit 1
  fi
  echo "test.sh: building Open Policy Agent for the opa test (about 2 minutes)" >&2
  mkdir -p "$opa"
  GOBIN="$PWD/$opa" go install github.com/open-policy-agent/opa@v1.22.3
fi

# The Helm chart's test runs Helm, built once from its Go module (about 3 minutes), and
# packaging/helm/check, which checks the rendered manifests against the Kubernetes API's types.
helm=target/tools/helm
[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null 2>&1; then
  echo "test.sh: the helm test needs Go 1.26 or later to build Helm: install it from https://go.dev/dl/" >&2
  exit 1
fi
mkdir -p "$helm"
if [ ! -x "$helm/helm" ]; then
  echo "test.sh: building Helm for the chart's test (about 3 minutes)" >&2
  GOBIN="$PWD/$helm" go install "helm.sh/helm/v3/cmd/helm@$(cat packaging/helm/check/helm.version)"
fi
(cd packaging/helm/check && go build -o "../../../$helm/check" .)

# The Gateway API translation's test reads the conformance suite's own manifests, from their Go
# module (sigs.k8s.io/gateway-api/conformance; no build), linked at target/tools.
gwapi="$(cat crates/sluice/tests/gateway-api.version)"
if [ ! -d target/tools/gateway-api-conformance/tests ]; then
  dir=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api/conformance@$gwapi" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  ln -sfn "$dir" target/tools/gateway-api-conformance
fi

# The ADC test runs APISIX's ADC CLI, vendored in third_party/adc (its source; GitHub is not
# reachable from CI) and bundled once with esbuild (its dependencies from npm, about 20 s).
adc=third_party/adc
if [ ! -f "$adc/dist/adc.cjs" ]; then
  echo "test.sh: building ADC for the admin API test" >&2
  (cd "$adc" && npm ci --no-audit --no-fund --loglevel=error && node build.mjs)
fi

# The dashboard test drives Debian's Chromium with playwright-core (pinned in its lock file).
dash=crates/sluice/tests/dashboard
if [ ! -d "$dash/node_modules/playwright-core" ]; then
  echo "test.sh: installing playwright-core for the dashboard test" >&2
  (cd "$dash" && npm ci --no-audit --no-fund --loglevel=error)
fi

# The openid-connect test runs a real OpenID provider: panva's oidc-provider (pinned in its
# lock file), on Node.js.
oidc=crates/sluice/tests/oidc
if [ ! -d "$oidc/node_modules/oidc-provider" ] || [ ! -d "$oidc/node_modules/playwright-core" ]; then
  echo "test.sh: installing oidc-provider and playwright-core for the openid-connect test" >&2
  (cd "$oidc" && npm ci --no-audit --no-fund --loglevel=error)
fi

exec cargo test --workspace --locked "$@"
