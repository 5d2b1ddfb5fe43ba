#!/usr/bin/env bash
# The release build (one static binary) with the git commit baked in for gateway_build_info:
# "<12 hex digits>", "-dirty" appended when tracked files differ from it, "unknown" outside a git checkout.
# GATEWAY_COMMIT in the environment wins (the Docker build passes it, having no .git).
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${GATEWAY_COMMIT:-}
if [ -z "$commit" ]; then
    commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit-dirty"; fi
fi
# Only what a commit label may hold: the value becomes a C string literal.
[[ "$commit" =~ ^[A-Za-z0-9._-]{1,64}$ ]] || { echo "release-build: bad commit label: $commit" >&2; exit 2; }
exec swift build -c release --product gateway --static-swift-stdlib -Xcc "-DGATEWAY_COMMIT=\"$commit\"" "$@"
