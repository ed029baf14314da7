# Rally — developer commands. `make dev` runs the local stack; `make test`
# runs every test. Both install what they need (npm packages) and say
# clearly what is missing when they cannot (Go, Node.js, Java).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO        ?= go
FUNCTIONS := $(sort $(notdir $(wildcard functions/*)))
BUILD_DIR := build
# grpcnotrace keeps golang.org/x/net/trace (and html/template) out of the
# gRPC the X-Ray SDK links; with protobuf >= 1.36.12 (go.mod) the linker can
# again drop unused methods, which halves every function (see README).
GOFLAGS_LAMBDA := -tags lambda.norpc,grpcnotrace -trimpath -ldflags "-s -w"

.PHONY: dev invoke test bench build synth deploy lint fmt-check clean tools check-go check-node check-java sam-env

dev: tools check-java ## Run the local stack on http://localhost:3000 (ARGS=-binaries: every function as its real binary)
	JSII_DEPRECATED=quiet $(GO) run ./infra/local $(ARGS)

invoke: tools ## Run FN's real binary against the running `make dev` stack: make invoke FN=favorite-game [EVENT=events/favorite-game.json]
	@test -n "$(FN)" || { echo "rally: give the function: make invoke FN=<name> [EVENT=events/<file>] (functions: $(FUNCTIONS))" >&2; exit 1; }
	JSII_DEPRECATED=quiet $(GO) run ./infra/local/invoke -fn $(FN) $(if $(EVENT),-event $(EVENT)) $(ARGS)

# make test compiles every package once, with the race detector: go test
# runs every vet check on the packages it tests (-vet=all) and go vet the
# rest, the boot test builds the function binaries with -race so they
# reuse the same compiled packages, and the CLI synth runs the app built
# with -race, beside the tests. The synth check gives each function a
# placeholder asset (the template does not depend on the binaries' bytes);
# `make synth` and `make deploy` cross-compile the real ones. Test binaries
# are linked without DWARF (-ldflags=-w): a third less linking.
lint: fmt-check ## gofmt and go vet
	$(GO) vet ./...

fmt-check: check-go
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	if [ -n "$$unformatted" ]; then echo "rally: not gofmt-formatted:"; echo "$$unformatted"; exit 1; fi

clean: ## Remove build outputs and local state
	rm -rf $(BUILD_DIR) cdk.out .local

tools: check-go check-node node_modules/.installed

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

check-go:
	@command -v $(GO) >/dev/null || { echo "rally: Go is required (https://go.dev/dl/); it was not found on PATH" >&2; exit 1; }

check-node:
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "rally: Node.js 20+ with npm is required (https://nodejs.org/); it was not found on PATH" >&2; exit 1; }

check-java:
	@command -v java >/dev/null || { echo "rally: Java 17+ is required to run DynamoDB Local (e.g. apt-get install openjdk-17-jre-headless); it was not found on PATH" >&2; exit 1; }

help:
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

bench: tools check-java ## Measure the hot paths beside their floors and rewrite BENCHMARKS.md (about 15 minutes)
	$(GO) run ./infra/bench -out BENCHMARKS.md $(ARGS)
