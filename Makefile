# The two commands: `make run` (gateway + example upstream + Redis, Ctrl-C stops all) and `make test`.
SHELL := /bin/bash
DEBIAN_PACKAGES := libssl-dev libcbor-dev libcurl4-openssl-dev libuv1-dev libhttp-parser-dev libyaml-dev \
                   pkg-config redis-server python3 python3-cryptography openssl prometheus curl libnghttp2-dev nghttp2-client python3-h2
.PHONY: deps build test run demo clean

deps:
	@./scripts/install-deps.sh $(DEBIAN_PACKAGES)

build: deps
	./scripts/release-build.sh

test: deps
	./scripts/test.sh

run: deps
	./scripts/run.sh

# The app's side of the story: AppAttestClient (the iOS package) driven by a simulated iPhone, then an Android
# phone's Play Integrity exchange (test keys standing in for Google's).
demo:
	./scripts/release-build.sh
	swift build -c release --product app-demo --static-swift-stdlib
	.build/release/app-demo --gateway http://127.0.0.1:8080 --ca run/demo-ca --config gateway.yaml --log run/gateway.log

clean:
	rm -rf .build run

# Load benchmark against nginx and a DIY verifier, all on 127.0.0.1 (bench/README.md); writes bench/results/latest.json.
.PHONY: bench
bench:
	./bench/run.sh
