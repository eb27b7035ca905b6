#!/usr/bin/env bash
# The main job, as far as it reaches today: a domain certificate, a
# semi-static key, a signed key record in every DNS encoding, verification
# (and refusal of a tampered, expired and wrong-name record), then, as root,
# the emulated WAN lab measuring its own accuracy at 20/100/200 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p zrtt
Z=$PWD/target/release/zrtt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step "a test CA and an ECDSA P-256 certificate for www.example.com"
"$Z" keys cert --name www.example.com --out-dir pki
step "a semi-static X25519 key"
"$Z" keys generate --out k1.pem
step "a key record signed by the certificate key, valid for one hour"
"$Z" keys sign --key k1.pem --cert pki/cert.pem --cert-key pki/cert.key --name www.example.com --out k1.record
"$Z" keys show k1.record
step "the record as zone-file lines: HTTPS (key65380), TXT, AAAA tunnel, TLSA 3 0 0"
"$Z" keys encode k1.record --cert pki/cert.pem --ipv4hint 198.18.0.2 | cut -c1-160
step "verification, and three refusals"
"$Z" keys verify k1.record --cert pki/cert.pem --name www.example.com
"$Z" keys verify k1.record --cert pki/cert.pem --name other.example.com || true
"$Z" keys verify k1.record --cert pki/cert.pem --name www.example.com --at 2100-01-01T00:00:00Z || true
python3 -c "import sys; b=bytearray(open('k1.record','rb').read()); b[10]^=1; open('bad.record','wb').write(b)"
"$Z" keys verify bad.record --cert pki/cert.pem --name www.example.com || true
if [ "$(id -u)" = 0 ]; then
  step "the emulated WAN: namespaces + delay hub, accuracy at RTT 20/100/200 ms"
  "$Z" lab check --probes 30 --tcp-connects 5
else
  step "lab check skipped: the lab needs root"
fi
