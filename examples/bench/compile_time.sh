#!/usr/bin/env bash
# What the attributes cost the compiler, beside `#[tracing::instrument]`,
# which every async service already carries: crates of N methods
#   plain       no attribute
#   instrument  #[tracing::instrument(skip(self))]
#   one         #[retryable]
#   two         #[circuit_breakable] #[retryable]
#   six         all six attributes
# each `cargo check`ed alone (dependencies built first, no incremental
# cache), three runs each, with the medians and the ratios of the time each
# adds to the plain crate's; then an incremental re-check after editing one
# method's body, for the plain and the six-attribute crate; then, where
# `-Z` flags can be had (RUSTC_BOOTSTRAP, this script only), the macro
# expansion time per fn and the expanded lines per method.
# Usage: examples/bench/compile_time.sh [N]   (default 500)
# CRATES="six" limits the crates; RESILIENT=path checks another checkout's
# resilient-core (to compare two commits, run it once for each, in turn).
# COUNT=instructions counts the instructions of each crate's check instead
# (valgrind's callgrind, one run each, N default 50): exact where the times
# move with the machine's load, and the ratios of the time each adds.
set -euo pipefail
count=${COUNT:-time}
if [ "$count" = instructions ]; then n=${1:-50}; else n=${1:-500}; fi
root=${RESILIENT:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gen() { # gen NAME ATTRIBUTES...
  local name=$1
  shift
  local dir="$work/$name"
  mkdir -p "$dir/src"
  cat > "$dir/Cargo.toml" <<TOML
[package]
name = "$name"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
resilient-core = { path = "$root/resilient-core" }
thiserror = "2"
tracing = { version = "0.1", features = ["attributes"] }

[workspace]
TOML
  {
    cat <<'RS'
#![allow(dead_code, unused_imports)]
use resilient_core::*;

#[derive(RetrySpec)] #[spec("ct.retry")] pub struct R;
#[derive(CircuitBreakerSpec)] #[spec("ct.breaker")] pub struct B;
#[derive(TimeoutSpec)] #[spec("ct.timeout")] pub struct T;
#[derive(ConcurrencyLimitSpec)] #[spec("ct.limit")] pub struct C;
#[derive(RateLimiterSpec)] #[spec("ct.rate")] pub struct L;

#[derive(Debug, thiserror::Error)]
pub enum E {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

pub struct Client;

impl Client {
    fn cached(&self, id: u64) -> Result<u64, E> { Ok(id) }
RS
    for i in $(seq 1 "$n"); do
      for attr in "$@"; do
        printf '    %s\n' "$attr"
      done
      printf '    pub async fn m%d(&self, id: u64) -> Result<u64, E> {\n        if id == %d { return Err(E::Down); }\n        Ok(id + 1)\n    }\n' "$i" "$i"
    done
    echo "}"
  } > "$dir/src/lib.rs"
}

read -r -a crates <<< "${CRATES:-plain instrument one two six}"
has() { [[ " ${crates[*]} " == *" $1 "* ]]; }
gen plain
gen instrument '#[tracing::instrument(skip(self))]'
gen one '#[retryable(R)]'
gen two '#[circuit_breakable(B)]' '#[retryable(R)]'
gen six '#[fallback(method = "cached(id)")]' '#[circuit_breakable(B)]' '#[retryable(R)]' \
  '#[rate_limited(L)]' '#[concurrency_limit(C)]' '#[timeout(T)]'

check() { # check CRATE -> seconds
  local start end
  start=$(date +%s.%N)
  (cd "$work/$1" && CARGO_TARGET_DIR="$work/target-$1" cargo check -q)
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }'
}

# Dependencies first, each crate in its own target dir (the crates share a
# name-free layout, and a shared dir would rebuild on every switch).
for c in "${crates[@]}"; do
  (cd "$work/$c" && CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$work/target-$c" cargo check -q 2>&1 | tail -3)
done

# Instructions, where asked: the check's rustc run again under callgrind.
if [ "$count" = instructions ]; then
  command -v valgrind >/dev/null || { echo "COUNT=instructions needs valgrind" >&2; exit 1; }
  declare -A ir
  for c in "${crates[@]}"; do
    touch "$work/$c/src/lib.rs"
    cmd=$(cd "$work/$c" && CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$work/target-$c" cargo check -v 2>&1 |
      sed -n 's/^ *Running `\(.*\)`$/\1/p' | tail -n 1)
    touch "$work/$c/src/lib.rs"
    ir[$c]=$(cd "$work/$c" && eval "valgrind --tool=callgrind --callgrind-out-file=/dev/null $cmd" 2>&1 |
      sed -n 's/.*Collected : //p')
    printf '%-10s %s instructions\n' "$c" "${ir[$c]}"
  done
  if has plain && has instrument && has one && has two && has six; then
    awk -v p="${ir[plain]}" -v i="${ir[instrument]}" -v o="${ir[one]}" \
      -v t="${ir[two]}" -v s="${ir[six]}" -v n="$n" 'BEGIN {
      ai = i - p
      printf "added per fn: instrument %.1fM, one %.1fM, two %.1fM, six %.1fM\n", ai / n / 1e6, (o - p) / n / 1e6, (t - p) / n / 1e6, (s - p) / n / 1e6
      printf "against instrument'"'"'s: one %.2fx, two %.2fx, six %.2fx\n", (o - p) / ai, (t - p) / ai, (s - p) / ai
    }'
  fi
  exit 0
fi

# Without incremental compilation: after `touch`, an incremental build
# replays the unchanged crate from its cache, which measures the cache.
declare -A median
for c in "${crates[@]}"; do
  runs=()
  for _ in 1 2 3; do
    touch "$work/$c/src/lib.rs"
    runs+=("$(CARGO_INCREMENTAL=0 check "$c")")
  done
  median[$c]=$(printf '%s\n' "${runs[@]}" | sort -n | sed -n 2p)
  printf '%-10s %s s (runs: %s)\n' "$c" "${median[$c]}" "${runs[*]}"
done
if has plain && has instrument && has one && has two && has six; then
awk -v p="${median[plain]}" -v i="${median[instrument]}" -v o="${median[one]}" \
  -v t="${median[two]}" -v s="${median[six]}" 'BEGIN {
  ai = i - p; printf "added to plain: instrument %.2f s, one %.2f s, two %.2f s, six %.2f s\n", ai, o - p, t - p, s - p
  if (ai > 0) printf "against instrument'"'"'s: one %.2fx, two %.2fx, six %.2fx\n", (o - p) / ai, (t - p) / ai, (s - p) / ai
}'
fi

# Incremental: a full check to fill the cache, then one method's body edited.
for c in plain six; do
  has "$c" || continue
  (cd "$work/$c" && CARGO_INCREMENTAL=1 CARGO_TARGET_DIR="$work/target-$c" cargo check -q)
  sed -i 's/if id == 1 { return Err(E::Down); }/if id == 1 { return Err(E::Down); } let _ = id;/' "$work/$c/src/lib.rs"
  printf '%-10s incremental re-check after one body edit: %s s\n' "$c" "$(CARGO_INCREMENTAL=1 check "$c")"
done

# -Z flags, where the toolchain allows them here (RUSTC_BOOTSTRAP, script only).
for c in instrument six; do
  has "$c" || continue
  if out=$(cd "$work/$c" && touch src/lib.rs && RUSTC_BOOTSTRAP=1 CARGO_INCREMENTAL=0 \
      CARGO_TARGET_DIR="$work/target-$c" cargo rustc -q --lib -- -Ztime-passes 2>&1); then
    echo "$out" | awk -v c="$c" -v n="$n" '/time: +[0-9.]+;.*expand_crate/ {
      printf "%-10s macro expansion %.2f s, %.2f ms per fn\n", c, $2, $2 * 1000 / n; exit }'
  fi
done
for c in plain instrument six; do
  has "$c" || continue
  if lines=$(cd "$work/$c" && RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$work/target-$c" \
      cargo rustc -q --lib -- -Zunpretty=expanded 2>/dev/null | wc -l); then
    printf '%-10s expanded: %d lines\n' "$c" "$lines"
  fi
done
