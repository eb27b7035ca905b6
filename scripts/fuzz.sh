#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 60), seeded from the test
# vectors. Installs cargo-fuzz if missing. Uses the stable toolchain with
# RUSTC_BOOTSTRAP=1, because cargo-fuzz passes nightly-only sanitizer flags.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(record encodings frames server_first_flight)
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
# Seed corpora from the byte-exact vectors.
python3 - <<'PY'
import pathlib
root = pathlib.Path("fuzz/corpus")
vec = dict(l.split(" = ", 1) for l in pathlib.Path("crates/zrtt-proto/tests/vectors/vectors.txt").read_text().splitlines())
seeds = {
  "record": ["record", "svc_param_value"],
  "encodings": ["https_rdata", "txt_rdata", "svc_param_value"],
  "frames": ["nk_first_flight", "nk_reply", "reject_unknown_key", "nk_client_transport_0"],
  "server_first_flight": ["nk_first_flight", "ik_first_flight"],
}
for t, names in seeds.items():
    d = root / t; d.mkdir(parents=True, exist_ok=True)
    for n in names:
        (d / f"vector-{n}").write_bytes(bytes.fromhex(vec[n]))
PY
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${secs}s"
  cargo fuzz run "$t" "fuzz/corpus/$t" -- -max_total_time="$secs" -max_len=4096 2>&1 | tail -n 3
done
