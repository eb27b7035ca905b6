#!/usr/bin/env bash
# Answers per second for HTTPS key-record queries (two live keys) on
# loopback: `zrtt dns` against Knot DNS serving the same records, same load
# tool (dnsperf), same settings. Prints both rates and their ratio.
#
#   scripts/bench-dns.sh [SECONDS]        (default 10 s per server)
#
# Needs knotd and dnsperf (scripts/install-deps.sh) and a release build of
# zrtt (built here if missing). Traffic goes to 127.0.0.1 only; every
# server it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
TARGET=${CARGO_TARGET_DIR:-target}
ZRTT=${ZRTT:-$TARGET/release/zrtt}
command -v dnsperf >/dev/null || { echo "bench-dns: dnsperf missing (scripts/install-deps.sh)"; exit 1; }
KNOTD=$(command -v knotd || echo /usr/sbin/knotd)
[ -x "$KNOTD" ] || { echo "bench-dns: knotd missing (scripts/install-deps.sh)"; exit 1; }
[ -x "$ZRTT" ] || cargo build --release -p zrtt >/dev/null
echo "zrtt: $ZRTT${SERVE_EXAMPLE:+, server: $SERVE_EXAMPLE}"

W=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

now=$(date +%s)
"$ZRTT" keys cert --name www.example.com --out-dir "$W/pki" >/dev/null
"$ZRTT" keys init --keystore "$W/ks" --name www.example.com --cert "$W/pki/cert.pem" \
  --cert-key "$W/pki/cert.key" --no-key >/dev/null
# Two live keys, as during a rotation overlap: one made 40 minutes ago.
"$ZRTT" keys rotate --keystore "$W/ks" --at $((now - 2400)) >/dev/null
"$ZRTT" keys rotate --keystore "$W/ks" --at "$now" >/dev/null

cat >"$W/example.com.zone" <<'EOF'
$ORIGIN example.com.
$TTL 3600
@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )
  IN NS ns1
ns1 IN A 192.0.2.1
www IN A 192.0.2.10
www IN AAAA 2001:db8::10
EOF

free_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# zrtt dns
# SERVE_EXAMPLE=target/release/examples/serve measures the same server
# code built alone (cargo build --release -p zrtt-dns --example serve).
if [ -n "${SERVE_EXAMPLE:-}" ]; then
  "$SERVE_EXAMPLE" "$W/example.com.zone" "$W/ks" 127.0.0.1:0 >"$W/zrtt.out" 2>"$W/zrtt.err" &
else
  "$ZRTT" dns --zone "$W/example.com.zone" --keystore "$W/ks" --listen 127.0.0.1:0 \
    --no-rotate --log-level error >"$W/zrtt.out" 2>"$W/zrtt.err" &
fi
PIDS+=($!)
for _ in $(seq 100); do grep -q listening "$W/zrtt.out" 2>/dev/null && break; sleep 0.1; done
ZPORT=$(sed -n 's/.*udp=127.0.0.1:\([0-9]*\).*/\1/p' "$W/zrtt.out")

# Knot with the same records (zone file + `zrtt keys publish --zone-fragment`).
mkdir -p "$W/knot/db"
cp "$W/example.com.zone" "$W/knot/example.com.zone"
"$ZRTT" keys publish --keystore "$W/ks" --zone-fragment --ipv4hint 192.0.2.10 \
  --ipv6hint 2001:db8::10 >>"$W/knot/example.com.zone"
KPORT=$(free_port)
cat >"$W/knot/knot.conf" <<EOF
server:
    rundir: "$W/knot"
    listen: 127.0.0.1@$KPORT
$( [ "$(id -u)" = 0 ] && echo "    user: root:root" )
log:
  - target: stderr
    any: warning
database:
    storage: "$W/knot/db"
template:
  - id: default
    storage: "$W/knot"
    file: "%s.zone"
zone:
  - domain: example.com
EOF
"$KNOTD" -c "$W/knot/knot.conf" 2>"$W/knot.err" &
PIDS+=($!)
for _ in $(seq 100); do
  dig +short +time=1 +tries=1 @127.0.0.1 -p "$KPORT" example.com SOA >/dev/null 2>&1 && break
  sleep 0.1
done

echo "www.example.com HTTPS" >"$W/queries"
z=$(dig +norec @127.0.0.1 -p "$ZPORT" www.example.com HTTPS | awk '/MSG SIZE/{print $NF}')
k=$(dig +norec @127.0.0.1 -p "$KPORT" www.example.com HTTPS | awk '/MSG SIZE/{print $NF}')
zk=$(dig +norec +short @127.0.0.1 -p "$ZPORT" www.example.com HTTPS | md5sum)
kk=$(dig +norec +short @127.0.0.1 -p "$KPORT" www.example.com HTTPS | md5sum)
[ "$zk" = "$kk" ] || { echo "bench-dns: the two servers answer differently"; exit 1; }
echo "same HTTPS answer from both (2 keys): zrtt dns $z bytes, knot $k bytes"

run() { # port -> queries per second
  dnsperf -s 127.0.0.1 -p "$1" -d "$W/queries" -l "$SECS" -c 8 -T 1 -q 200 2>&1 |
    tee -a "$W/perf.log" | awk '/Queries per second/{print $4}'
}
zq=$(run "$ZPORT")
kq=$(run "$KPORT")
echo "zrtt dns: $zq answers/s"
echo "knot:     $kq answers/s"
grep -E "Queries (sent|completed|lost)" "$W/perf.log" | sed "s/^ */  /"
python3 -c "print(f'ratio zrtt/knot: {$zq/$kq:.2f}')"
