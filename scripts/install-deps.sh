#!/usr/bin/env bash
# System packages the test suite needs, installed only when missing
# (idempotent; runs apt at most once per call):
#   knot            knotd, the authoritative server `zrtt keys publish` is
#                   tested against (RFC 2136 + TSIG) and benchmarked with
#   bind9-dnsutils  dig, to check that a stock client reads `zrtt dns` answers
#   bind9-utils     named-checkzone: the zone lines zrtt emits load in BIND
#   dnsperf         the load tool for the answers-per-second comparison
#                   (docs/DNS.md); optional, the measurement has a Rust fallback
#   nftables        nft, to drop the client's final ACK in the zrtt-net lab
#                   test (gating); that test skips the check without it
#   nginx, curl     the demo's backend and TLS 1.3 baseline (zrtt demo)
#   unbound         the recursive resolver of the DNS round-trip measurement
#   openssl         `openssl s_client`: TLS 1.3 0-RTT resumption in the lab
#   ngtcp2-client,  gtlsclient / gtlsserver: HTTP/3 1-RTT and 0-RTT in the lab
#   ngtcp2-server
#   gcc             builds the small LD_PRELOAD shim that gives s_client TFO
#   nghttp2-client  h2load: HTTP/2 load against the gateway's TLS path
#   python3-websockets  a WebSocket client and server (Debian's /usr/bin/python3)
#                   relayed through the gateway's Upgrade support
#   chromium        a browser loading a page with subresources over the
#                   gateway's TLS path (HTTP/2), headless
#   python3-prometheus-client  a real OpenMetrics parser for the /metrics
#                   pages of every role (crates/zrtt/tests/metrics_cli.rs)
#   haproxy         the DZone article's sidecar pair in `zrtt lab sidecar`
#   bind9, nsd      BIND and NSD as secondaries of `zrtt dns` (zone transfer
#                   and NOTIFY through a key rotation, tests/dns_cli.rs)
#   redis-server,   the fleet's shared replay store (docs/FLEET.md): one
#   redis-tools     server and a 3-node Redis Cluster (redis-cli --cluster
#                   create) in zrtt-net's tests/fleet.rs
set -euo pipefail

need=()
command -v knotd >/dev/null 2>&1 || need+=(knot)
command -v dig >/dev/null 2>&1 || need+=(bind9-dnsutils)
command -v named-checkzone >/dev/null 2>&1 || need+=(bind9-utils)
command -v dnsperf >/dev/null 2>&1 || need+=(dnsperf)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v nginx >/dev/null 2>&1 || need+=(nginx)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v unbound >/dev/null 2>&1 || need+=(unbound)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v gtlsclient >/dev/null 2>&1 || need+=(ngtcp2-client)
command -v gtlsserver >/dev/null 2>&1 || need+=(ngtcp2-server)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
/usr/bin/python3 -c 'import websockets' >/dev/null 2>&1 || need+=(python3 python3-websockets)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
/usr/bin/python3 -c 'import prometheus_client' >/dev/null 2>&1 || need+=(python3 python3-prometheus-client)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v named >/dev/null 2>&1 || need+=(bind9)
command -v nsd >/dev/null 2>&1 || need+=(nsd)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${need[*]}; run as root to install them" >&2
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
# Packages such as nginx and knot start a system service on install where an
# init system runs; the project starts its own instances inside its
# namespaces, so forbid service starts while installing (Debian's
# policy-rc.d convention), unless the machine already has a policy.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod +x "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
# dnsperf is a nice-to-have: install the required packages first, so that a
# mirror without it does not stop the rest.
required=()
for p in "${need[@]}"; do
  [ "$p" = dnsperf ] || required+=("$p")
done
if [ ${#required[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${required[@]}" >/dev/null
fi
if [[ " ${need[*]} " == *" dnsperf "* ]]; then
  apt-get install -y -qq --no-install-recommends dnsperf >/dev/null ||
    echo "install-deps: dnsperf not available; the benchmark falls back to its own load generator" >&2
fi
# The Debian packages start knotd and redis-server services where an init
# system runs; the tests start their own on free loopback ports and do not
# need them.
