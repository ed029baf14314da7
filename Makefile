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
LAMBDA_TAGS    := lambda.norpc,grpcnotrace
GOFLAGS_LAMBDA := -tags $(LAMBDA_TAGS) -trimpath -ldflags "-s -w"

.PHONY: dev invoke test bench cost build synth deploy lint fmt-check clean tools check-go check-node check-java sam-env

dev: tools check-java ## Run the local stack on http://localhost:3000 (ARGS=-binaries: every function as its real binary)
	JSII_DEPRECATED=quiet $(GO) run ./infra/local $(ARGS)

invoke: tools ## Run FN's real binary against the running `make dev` stack: make invoke FN=favorite-game [EVENT=events/favorite-game.json]
	@test -n "$(FN)" || { echo "rally: give the function: make invoke FN=<name> [EVENT=events/<file>] (functions: $(FUNCTIONS))" >&2; exit 1; }
	JSII_DEPRECATED=quiet $(GO) run ./infra/local/invoke -fn $(FN) $(if $(EVENT),-event $(EVENT)) $(ARGS)

# make test compiles every package once, with the race detector and the
# functions' build tags (the code the functions run): go test runs every
# vet check on the packages it tests (-vet=all) and go vet the rest, the
# boot test builds the function binaries with -race and the same tags so
# they reuse the same compiled packages, and the CLI synth runs the app built
# with -race, beside the tests. The synth check gives each function a
# placeholder asset (the template does not depend on the binaries' bytes);
# `make synth` and `make deploy` cross-compile the real ones. Test binaries
# are linked without DWARF (-ldflags=-w): a third less linking.
# The tests run through infra/testrun, which reads go test -json: the
# console shows what go test shows without -v (each package's result, every
# failed test's whole output) and, at the end, every skipped test with its
# reason; under CI=true a skipped test fails the run.
# Test packages run two at a time (TEST_P; more keeps a 2-core machine
# busier but slows the load tests' requests to seconds). The compiler, the
# linker and the tests collect garbage less often (GOGC 400): memory is not
# what a test run is short of.
TEST_P    ?= 2
TEST_GOGC ?= 400
test: tools check-java ## Unit, integration and CDK tests (race detector, every vet check) and a cdk synth
	@$(MAKE) --no-print-directory fmt-check
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	for f in $(FUNCTIONS); do mkdir -p "$$tmp/build/$$f"; echo placeholder > "$$tmp/build/$$f/bootstrap"; done; \
	echo "go build -race ./infra; npx cdk synth (placeholder assets) runs beside the tests"; \
	$(GO) build -race -tags $(LAMBDA_TAGS) -ldflags=-w -o "$$tmp/app" ./infra; \
	{ JSII_DEPRECATED=quiet npx --no-install cdk synth --quiet --app "$$tmp/app" -c buildDir="$$tmp/build" -o "$$tmp/cdk.out" > "$$tmp/synth.log" 2>&1; echo $$? > "$$tmp/synth.rc"; } & \
	untested=$$($(GO) list -f '{{if not (or .TestGoFiles .XTestGoFiles)}}{{.ImportPath}}{{end}}' ./...); \
	echo "go vet -race: the $$(echo $$untested | wc -w) packages without tests"; \
	if $(GO) vet -race -tags $(LAMBDA_TAGS) $$untested; then rc=0; else rc=$$?; fi; \
	if [ $$rc = 0 ]; then $(GO) build -o "$$tmp/testrun" ./infra/testrun || rc=$$?; fi; \
	if [ $$rc = 0 ]; then \
		echo "go test -json -race -tags $(LAMBDA_TAGS) -vet=all -ldflags=-w -count=1 -p $(TEST_P) -timeout 30m ./... (through infra/testrun)"; \
		if GO=$(GO) GOGC=$(TEST_GOGC) "$$tmp/testrun" -race -tags $(LAMBDA_TAGS) -vet=all -ldflags=-w -count=1 -p $(TEST_P) -timeout 30m ./...; then rc=0; else rc=$$?; fi; \
	fi; \
	wait; \
	if [ "$$(cat "$$tmp/synth.rc" 2>/dev/null)" != 0 ]; then echo "rally: npx cdk synth failed:"; cat "$$tmp/synth.log"; exit 1; fi; \
	echo "npx cdk synth (placeholder assets): ok"; \
	exit $$rc
	@echo "rally: all tests passed and the CDK stack synthesized"

build: check-go ## Build every Lambda to build/<name>/bootstrap (linux/arm64)
	@rm -rf $(BUILD_DIR)
	@for f in $(FUNCTIONS); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(GOFLAGS_LAMBDA) -o $(BUILD_DIR)/$$f/bootstrap ./functions/$$f || exit 1; \
	done
	@echo "rally: built $(words $(FUNCTIONS)) functions into $(BUILD_DIR)/: $$(stat -c %s $(BUILD_DIR)/*/bootstrap | sort -n | awk 'NR==1{lo=$$1} {hi=$$1} END{printf "%.1f to %.1f MB each", lo/1e6, hi/1e6}')"

synth: tools build ## Synthesize the CloudFormation template into cdk.out/
	npx --no-install cdk synth

sam-env: check-go ## After make synth: .local/sam-env.json for sam local invoke; FN=<function> prints its command
	$(GO) run ./infra/local/samenv -stage $(or $(STAGE),dev) $(if $(FN),-fn $(FN)) $(ARGS)

deploy: tools build ## Deploy the stack to the current AWS account and region
	npx --no-install cdk deploy --require-approval broadening $(ARGS)

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

bench: tools check-java ## Measure the hot paths beside their floors and rewrite BENCHMARKS.md (about an hour on 2 cores, 30 minutes of it the size section at 100k players and 17 the erasure section seeding 200k; ARGS="-only name,..." for some sections)
	$(GO) run ./infra/bench -out BENCHMARKS.md $(ARGS)

cost: tools check-java ## Price each route and the seeds' months in dollars from units measured on the local stack (about a minute, two the first time as it synthesizes the stack; the bench's cost section, printed)
	JSII_DEPRECATED=quiet $(GO) run ./infra/bench -only cost -out - $(ARGS)
