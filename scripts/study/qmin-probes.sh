#!/bin/bash
# What a recursive resolver sends an authoritative server for a long,
# unique name of the DNS shortcut's shape (docs/DNS.md §8.4): Debian's
# unbound on loopback (127.0.0.11:5301) in front of a logging authoritative
# (127.0.0.10:5300, qmin-auth.py). Root not needed; loopback only.
# usage: qmin-probes.sh nx|ent yes|no [HOST-LABEL] [QTYPE]
#   nx|ent: the authoritative's answer to partial names (NXDOMAIN, or
#   NOERROR/NODATA as for an empty non-terminal); yes|no: qname-minimisation.
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$1 Q=$2
D=$(mktemp -d /tmp/zrtt-qmin.XXXX)
sed "s#DIR#$D#g; s#QMIN#$Q#" "$here/qmin-unbound.conf.in" > "$D/u.conf"
/usr/bin/python3 "$here/qmin-auth.py" 127.0.0.10 5300 "$P" "$D/q.log" & A=$!
/usr/sbin/unbound -c "$D/u.conf" & U=$!
trap 'kill $A $U 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 50); do
  dig +short +time=1 +tries=1 @127.0.0.11 -p 5301 www.example.com A >/dev/null 2>&1 && break
  sleep 0.1
done
: > "$D/q.log"
label() { head -c 39 /dev/urandom | base32 | tr -d = | tr A-Z a-z | head -c 63; }
N=zq.$(label).$(label).$(label).${3:-www}.example.com
echo "name length: ${#N}"
dig +time=3 +tries=1 @127.0.0.11 -p 5301 "$N" "${4:-TXT}" | grep -E "status" | head -1
sleep 0.3
echo "the authoritative saw $(wc -l < "$D/q.log") queries (bytes, qtype, name):"
cut -c1-100 "$D/q.log"
