# sqsinbox: the commands a person (and CI) runs. `make help` lists them.
SHELL := bash
GO    ?= go
# Tools built from the Go module proxy are kept outside the repository.
TOOLS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sqsinbox/bin
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## The OrderPaid story through an SNS fan-out: fauxqs and a throwaway PostgreSQL started for you, evt_9f3k published twice, 1,000 more events with duplicates, warehouse and loyalty each applying every event once, a table.
	$(GO) run ./harness/cmd/demo

# The port of 127.0.0.1 that `make dev` starts fauxqs on: LocalStack's, so that the same
# environment works with either.
DEV_PORT ?= 4566
# The port of 127.0.0.1 of `make dev`'s own PostgreSQL (without DATABASE_URL): fixed, like its
# data directory, so that the DATABASE_URL it prints stays the same from one start to the next.
DEV_PG_PORT ?= 5434
# Your queues, besides localstack/'s: `make dev QUEUES="orders billing.fifo"`.
QUEUES ?=

# Built, then run: `go run` exits 1 on Ctrl-C whatever the command does, and make would report it.
.PHONY: dev
dev: ## fauxqs on 127.0.0.1:DEV_PORT (4566) and a PostgreSQL on DEV_PG_PORT (5434) whose data is kept (or DATABASE_URL's), with localstack/'s queues, DLQs and SNS topic, your QUEUES each with a DLQ, and the inbox migrated; prints the environment to export, runs until Ctrl-C. No Docker.
	@mkdir -p $(TOOLS_DIR)
	$(GO) build -o $(TOOLS_DIR)/sqsinbox-dev ./harness/cmd/dev
	exec $(TOOLS_DIR)/sqsinbox-dev -port $(DEV_PORT) -pgport $(DEV_PG_PORT) $(foreach q,$(QUEUES),-queue $(q))

# The SQS server the harness (harness/sqstest) starts for the first pass of `make test`: goaws
# (the default) or fauxqs. TESTING.md says how the suite runs and what each server gets wrong.
SQSINBOX_TEST_SQS ?= goaws
# The packages whose tests use an SQS server (harness/sqstest), run a second time against
# fauxqs when the first pass used GoAws. No test is skipped by name on either pass; a test that
# needs what GoAws gets wrong (FIFO queues, for one) skips itself on the GoAws pass and says why.
FAUXQS_PACKAGES := ./harness/sqstest/ ./doctor/ ./worker/ ./worker/inboxhandler/ ./harness/reliability/ \
	./cmd/sqsinbox/ ./harness/cmd/demo/ ./examples/loyalty/ ./examples/payments/ ./examples/payments-api/ ./examples/warehouse/ \
	./workerapp/ ./outbox/ ./worker/workerotel/ ./s3payload/ ./examples/firstworker/

.PHONY: test
test: ## Run every test under -race against real PostgreSQL and a real SQS server (started for you: GoAws, then fauxqs for the SQS packages), plus the localstack/ and terraform/ checks.
	$(GO) vet ./...
	scripts/localstack-check.sh
	scripts/examples-copy-check.sh
	scripts/tf-test.sh --cached
# With a server of your own (AWS_ENDPOINT_URL_SQS), one pass against it.
ifneq ($(AWS_ENDPOINT_URL_SQS)$(AWS_ENDPOINT_URL),)
	$(GO) test -race -count=1 -timeout 20m ./...
else
	SQSINBOX_TEST_SQS=$(SQSINBOX_TEST_SQS) $(GO) test -race -count=1 -timeout 20m ./...
  ifeq ($(SQSINBOX_TEST_SQS),goaws)
	SQSINBOX_TEST_SQS=fauxqs $(GO) test -race -count=1 -timeout 20m $(FAUXQS_PACKAGES)
  endif
endif

LOADED_COUNT ?= 5

.PHONY: test-loaded
test-loaded: ## Before you stop: every package's tests under -race with two CPU burners taking both cores, LOADED_COUNT (5) times, on GoAws and then fauxqs (scripts/test-loaded.sh; about an hour; PKGS=./inbox/ for fewer). Not in CI's path.
	COUNT=$(LOADED_COUNT) scripts/test-loaded.sh $(PKGS)

.PHONY: bench
bench: bench-inbox bench-http bench-worker bench-relay ## Run the benchmarks and print their tables.

.PHONY: bench-inbox
bench-inbox: ## Inbox claim-and-run against pgbench running the same SQL on the same server.
	$(GO) test -run '^$$' -bench BenchmarkInboxVsPgbench -benchtime 1x -timeout 30m ./inbox/

.PHONY: bench-querymodes
bench-querymodes: ## Inbox claim-and-run in each pgx query mode, direct and through PgBouncer (transaction mode): medians of 10 interleaved rounds, ratio to pgx's default on a direct connection.
	$(GO) test -run '^$$' -bench BenchmarkClaimQueryModes -benchtime 1x -timeout 30m ./inbox/

.PHONY: bench-pooler
bench-pooler: ## 16 warehouse workers at their defaults through PgBouncer (default_pool_size 20) against 4 on direct connections, each draining a backlog: msgs/s, server connections, ratio (3 interleaved rounds).
	$(GO) run ./harness/cmd/poolerbench -n 20000 -rounds 3

.PHONY: bench-http
bench-http: ## HTTP Idempotency-Key middleware: req/s with and without it, first attempts and replays at c=1/8/32.
	$(GO) test -run '^$$' -bench BenchmarkHTTP -benchtime 2000x -timeout 30m ./inbox/idempotency/

.PHONY: bench-worker
bench-worker: ## Worker msgs/s at c=1/8/32/64 against GoAws and the fake, beside raw GoAws and inbox-only (same run), allocs/msg, memory at 1,000 in flight; then batched commits (N=10/20) on GoAws and fauxqs against the raw drain and batched inbox-only, and against N=1; then the latency table: the worker at its defaults with SQS 0/5/20/50 ms and PostgreSQL 0/1 ms away (delaying proxies), against the frozen reference loop and the raw drain; then the SQS requests per 1,000 messages of the worker and of sqs-consumer (npm) draining a backlog.
	$(GO) run ./harness/cmd/workerbench -n 3000 -c 1,8,32,64 -repeat 2 -sqs goaws,fauxqs -batch 10,20 -bc 2,8 -bpollers 0,2 -rawpollers 1,2,4
	$(GO) run ./harness/cmd/workerbench -n 10000 -c '' -inflight 0 -sqs goaws,fauxqs -lat-sqs 0,5,20,50 -lat-pg 0,1 -refc 16,64
	$(GO) run ./harness/cmd/workerbench -c '' -inflight 0 -sqs goaws,fauxqs -peers 3000

.PHONY: bench-relay
bench-relay: ## Outbox relay msgs/s against a raw SendMessageBatch loop (fauxqs), with SQS 0/5/20/50 ms away (a delaying proxy), 3 rounds; then FIFO destinations.
	SQSINBOX_TEST_SQS=fauxqs SQSINBOX_BENCH_N=10000 SQSINBOX_BENCH_ROUNDS=3 SQSINBOX_BENCH_SQS_RTT=0,5,20,50 \
		$(GO) test -run '^$$' -bench 'BenchmarkRelay' -benchtime 1x -timeout 30m ./outbox/

SOAK_MESSAGES ?= 50000
SOAK_WORKERS  ?= 4

.PHONY: soak
soak: ## Every reliability scenario at SOAK_MESSAGES (50,000) messages with SOAK_WORKERS (4) workers, about 30 min; prints the checker's table (RELIABILITY.md).
	$(GO) run ./harness/cmd/soak -messages $(SOAK_MESSAGES) -workers $(SOAK_WORKERS)

.PHONY: examples-copy-check
examples-copy-check: ## Copy each example folder out of the repository with a go.mod of its own and build it (public packages only); build a module made with README.md's replace lines.
	scripts/examples-copy-check.sh

.PHONY: localstack-check
localstack-check: ## Check localstack/ statically (compose file, init script, queues) and prove each rule can fail.
	scripts/localstack-check.sh

.PHONY: tf-test
tf-test: ## Build OpenTofu and the AWS provider if missing (cached outside the repo; 35 min to 2 h cold, ~10 GB RAM), then fmt, validate and test terraform/.
	scripts/tf-test.sh

.PHONY: lint
lint: $(GOLANGCI_LINT) ## gofmt, go vet and the curated golangci-lint set (.golangci.yml).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS_DIR)/golangci-lint $@
