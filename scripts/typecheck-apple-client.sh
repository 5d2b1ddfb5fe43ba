#!/usr/bin/env bash
# Type-checks the AppAttestClient files that only build on Apple's platforms (#if canImport(DeviceCheck))
# against Tests/AppleAPIStubs: DeviceCheck's documented signatures. Catches Swift errors here; it is not a
# build against Apple's SDK (the Keychain file is not checked at all).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/apple-stubs.XXXXXX)
trap 'rm -rf "$work"' EXIT
swiftc -emit-module -parse-as-library -module-name DeviceCheck Tests/AppleAPIStubs/DeviceCheck.swift -o "$work/DeviceCheck.swiftmodule"
sources=$(ls Sources/AppAttestClient/*.swift | grep -v KeychainKeyIdStore.swift)
# shellcheck disable=SC2086
swiftc -swift-version 6 -typecheck -module-name AppAttestClient -I "$work" $sources Tests/AppleAPIStubs/KeychainKeyIdStore.swift
echo "AppAttestClient's DeviceCheck files type-check against the documented API"
