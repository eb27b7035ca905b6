#!/usr/bin/env bash
# Runs the lab scenarios (as root) and refreshes docs/results/ and the
# generated parts of docs/RESULTS.md. With arguments, only those scenarios:
#   bash scripts/results.sh                 # check ladder ztls ztls_shortcut plt browser sidecar throughput asap faults (about 75 min)
#   bash scripts/results.sh ladder plt      # a subset
# Extra flags for every scenario go in ZRTT_LAB_FLAGS (e.g. "--keep").
# Measure on an otherwise idle machine: timings share its two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "results: the lab needs root (network namespaces, TUN devices)" >&2
  exit 1
fi
bash scripts/install-deps.sh
cargo build --release --locked -p zrtt
zrtt=target/release/zrtt
out=docs/results
mkdir -p "$out"
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(check ladder ztls ztls_shortcut plt browser sidecar throughput asap faults)
for s in "${scenarios[@]}"; do
  echo "== zrtt lab $s" >&2
  if [ "$s" = check ]; then
    # Accuracy of the delay hub itself, kept as text.
    "$zrtt" lab check | tee "$out/check.txt"
  elif [ "$s" = ztls_shortcut ]; then
    # The DNS shortcut's rows of the ztls lab (report ztls_shortcut).
    # shellcheck disable=SC2086
    "$zrtt" lab ztls --shortcut --out "$out" ${ZRTT_LAB_FLAGS:-} >/dev/null
  else
    # shellcheck disable=SC2086
    "$zrtt" lab "$s" --out "$out" ${ZRTT_LAB_FLAGS:-} >/dev/null
  fi
done
python3 scripts/results-splice.py docs/RESULTS.md "$out"
echo "results: docs/RESULTS.md and $out/ updated" >&2
