#!/usr/bin/env bash
# The thread-per-connection gateway (commit 49b53de, the last one before the event-loop core), built once in
# release for bench/run.sh's comparison runs and cached under .build-old/<commit>/ (gitignored). Its source
# is exported with `git archive` (no worktree to clean up). Prints the binary's path; exits non-zero, with
# the reason on stderr, when it cannot be built (then the bench reports the comparison as not measured).
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${BENCH_OLD_COMMIT:-49b53de}
dir=.build-old/$commit
binary=$dir/src/.build/release/gateway
if [ -x "$binary" ] && [ -f "$dir/built" ]; then echo "$binary"; exit 0; fi
git cat-file -e "$commit^{commit}" 2>/dev/null || { echo "build-old: commit $commit is not in this clone" >&2; exit 1; }
./scripts/install-deps.sh libmicrohttpd-dev libhiredis-dev >&2
rm -rf "$dir"
mkdir -p "$dir/src"
git archive "$commit" | tar -x -C "$dir/src"
echo "build-old: building $commit in release (once; cached in $dir)" >&2
if ! (cd "$dir/src" && swift build -c release --product gateway --static-swift-stdlib) > "$dir/build.log" 2>&1; then
    echo "build-old: the build of $commit failed, see $dir/build.log" >&2
    tail -5 "$dir/build.log" >&2
    exit 1
fi
touch "$dir/built"
echo "$binary"
