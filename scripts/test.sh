#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need,
# then runs every test. Tests that need root (network namespaces) say
# "skipped: needs root" when run as another user.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/install-deps.sh ] || [ -f scripts/install-deps.sh ]; then
  bash scripts/install-deps.sh
fi
cargo test --workspace --locked
