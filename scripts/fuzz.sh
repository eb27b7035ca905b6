#!/usr/bin/env bash
# Run every fuzz target (one after the other) for SECONDS each (default 60),
# seeded from the test vectors and from real encodings (tokens,
# certificates, snapshots, first-flight plaintexts: the seeds test in
# crates/zrtt-proto/src/tests/fuzz.rs writes them). Installs cargo-fuzz if
# missing. Uses the stable toolchain with RUSTC_BOOTSTRAP=1, because
# cargo-fuzz passes nightly-only flags.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
# Environment:
#   FUZZ_RUNS=N          stop each target after N executions instead (the
#                        time limit still applies as a cap)
#   FUZZ_SANITIZER=none  sanitizer (default none: zrtt-proto forbids unsafe
#                        code, so ASan finds nothing there; overflow checks
#                        and debug assertions stay on; `address` for the
#                        unsafe code of dependencies, at a fraction of the speed)
#   FUZZ_NICE=19         niceness of builds and runs
#   FUZZ_TARGET_DIR      cargo target directory (default fuzz/target)
#   FUZZ_SKIP_SEEDS=1    do not (re)write the seeds from real encodings
# Logs go to fuzz/logs/<target>.log; the last lines of each are printed,
# with libFuzzer's final statistics (executions, coverage, corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=("$@")
all=(record encodings frames server_first_flight first_flight_plaintext client_reply
     channel token ticket provenance der_validity verifier_wire replay_snapshot
     state_files early_use dns_answer tls_sessions http2_early shortcut)
# Targets of zrtt-net's parsers need the fuzz crate's `net` feature.
net_targets=" state_files early_use dns_answer tls_sessions "
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
san=${FUZZ_SANITIZER:-none}
nice=(nice -n "${FUZZ_NICE:-19}")
tdir=${FUZZ_TARGET_DIR:-fuzz/target}
command -v cargo-fuzz >/dev/null || "${nice[@]}" cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1 CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
# Seed corpora from the byte-exact vectors.
python3 - <<'PY'
import pathlib
root = pathlib.Path("fuzz/corpus")
vec = dict(l.split(" = ", 1) for l in pathlib.Path("crates/zrtt-proto/tests/vectors/vectors.txt").read_text().splitlines())
seeds = {
  "record": ["record", "svc_param_value"],
  "encodings": ["https_rdata", "txt_rdata", "svc_param_value"],
  "frames": ["nk_first_flight", "nk_reply", "reject_unknown_key", "nk_client_transport_0", "shortcut_first_flight"],
  "server_first_flight": ["nk_first_flight", "ik_first_flight"],
  "client_reply": ["reject_unknown_key"],
}
d = root / "state_files"; d.mkdir(parents=True, exist_ok=True)
(d / "seed-tokens").write_text("# zrtt token state\nstatic www.example.com " + "11" * 32 +
    "\ntoken www.example.com 198.18.0.1 02aabbcc\ntoken www.example.com ::1 00\n")
(d / "seed-provenance").write_text("198.18.0.1 " + "22" * 32 + " 01" + "00000007" + "04c6120001" +
    "0000000000000001" + "00000708" + "33" * 64 + "\n#zrtt-issuer 192.0.2.1:4433 00000007\n")
d = root / "early_use"; d.mkdir(parents=True, exist_ok=True)
(d / "seed-get").write_bytes(b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n")
(d / "seed-post").write_bytes(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
# tls_sessions: a ClientHello offering one PSK identity, in one record.
ident = b"\x07" * 32
psk = len(ident).to_bytes(2, "big") + ident + b"\x00\x00\x00\x09"
psk = len(psk).to_bytes(2, "big") + psk + b"\x00\x21\x20" + b"\x05" * 32
exts = b"\x00\x29" + len(psk).to_bytes(2, "big") + psk
body = b"\x03\x03" + b"\x01" * 32 + b"\x00" + b"\x00\x02\x13\x01\x01\x00" + len(exts).to_bytes(2, "big") + exts
msg = b"\x01" + len(body).to_bytes(3, "big") + body
d = root / "tls_sessions"; d.mkdir(parents=True, exist_ok=True)
(d / "seed-psk-hello").write_bytes(b"\x16\x03\x01" + len(msg).to_bytes(2, "big") + msg)
(d / "seed-handover").write_bytes(b"ZRTTTS1\x00\x00\x02t1\x00\x00\x00\x04abcd")
# dns_answer: a DNS response for www.example.com carrying the vector
# records as HTTPS and TXT answers.
def rr(rtype, rdata):
    return b"\xc0\x0c" + rtype.to_bytes(2, "big") + b"\x00\x01" + (300).to_bytes(4, "big") + \
        len(rdata).to_bytes(2, "big") + rdata
qname = b"".join(bytes([len(l)]) + l for l in b"www.example.com".split(b".")) + b"\0"
msg = (b"\x00\x01\x81\x80\x00\x01\x00\x02\x00\x00\x00\x00" + qname + b"\x00\x41\x00\x01" +
       rr(65, bytes.fromhex(vec["https_rdata"])) + rr(16, bytes.fromhex(vec["txt_rdata"])))
d = root / "dns_answer"; d.mkdir(parents=True, exist_ok=True)
(d / "seed-https-txt").write_bytes(msg)
for t, names in seeds.items():
    d = root / t; d.mkdir(parents=True, exist_ok=True)
    for n in names:
        data = bytes.fromhex(vec[n])
        # client_reply: mode byte 0 (raw frame) before the frame.
        (d / f"vector-{n}").write_bytes((b"\0" if t == "client_reply" else b"") + data)
PY
# Seeds behind the crypto and for the state parsers, from real encodings.
[ -n "${FUZZ_SKIP_SEEDS:-}" ] ||
  ZRTT_WRITE_FUZZ_SEEDS="$PWD/fuzz/corpus" "${nice[@]}" cargo test -q -p zrtt-proto \
    --features fixtures --lib fuzz_seeds_run_and_are_written >/dev/null
"${nice[@]}" cargo fuzz build -s "$san" --target-dir "$tdir" >/dev/null
"${nice[@]}" cargo fuzz build -s "$san" --target-dir "$tdir" --features net >/dev/null
mkdir -p fuzz/logs
limit=(-max_total_time="$secs")
[ -z "${FUZZ_RUNS:-}" ] || limit+=(-runs="$FUZZ_RUNS")
for t in "${targets[@]}"; do
  echo "== fuzz $t (${FUZZ_RUNS:+$FUZZ_RUNS runs, }at most ${secs}s) $(date -u +%FT%TZ)"
  mkdir -p "fuzz/corpus/$t"
  feat=(); [[ $net_targets == *" $t "* ]] && feat=(--features net)
  "${nice[@]}" cargo fuzz run -s "$san" --target-dir "$tdir" "${feat[@]}" "$t" "fuzz/corpus/$t" -- \
    "${limit[@]}" -max_len=4096 -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1 || {
    echo "!! $t failed (crash input in fuzz/artifacts/$t); log: fuzz/logs/$t.log"
    tail -n 30 "fuzz/logs/$t.log"; exit 1; }
  grep -E '^#[0-9]+[[:space:]]+DONE' "fuzz/logs/$t.log" | tail -n 1 || true
  grep -E 'stat::(number_of_executed_units|average_exec_per_sec)' "fuzz/logs/$t.log" || true
  echo "corpus: $(ls "fuzz/corpus/$t" | wc -l) files, $(du -sb "fuzz/corpus/$t" | cut -f1) bytes"
done
