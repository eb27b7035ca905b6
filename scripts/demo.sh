#!/usr/bin/env bash
# The main job: an emulated WAN (network namespaces + delay hub, RTT 100 ms),
# nginx, two zrtt gateways, and the same page fetched with curl over TLS 1.3
# and with zrtt on first contact; prints milliseconds and round trips.
# Needs root. Installs what it needs (nginx, ...) and builds zrtt first.
#   bash scripts/demo.sh [zrtt demo options, e.g. --rtt-ms 200 --runs 9]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "demo: run as root (it creates network namespaces)" >&2
  exit 1
fi
echo "[0/6] installing system packages if missing, building zrtt (release)" >&2
bash scripts/install-deps.sh
cargo build --release --locked -q -p zrtt
exec ./target/release/zrtt demo "$@"
