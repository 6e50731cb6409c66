# cqlguard: the two commands a new machine needs are `make demo` and `make test`.
SHELL       := /bin/bash
GO          ?= go
GOBIN       ?= $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
FUZZTIME    ?= 10s
# The product's module, and the modules of the benchmark tool and the deploy
# tests, which go.work ties together: their dependencies (plotting, an event
# loop, Kubernetes' types) stay out of the product's go.mod.
PACKAGES    := ./... ./deploy/... ./test/bench/...
# CQLGUARD is where build puts the binary.
CQLGUARD    ?= bin/cqlguard
# REVISION is the revision build stamps into the binary for `cqlguard
# version`: git describe's, "-dirty" when the tree has changes. Outside a Git
# checkout it is empty, and the binary names the revision Go stamped, if
# any. The Dockerfile stamps the same way.
REVISION    ?= $(shell git describe --always --dirty 2>/dev/null)

.PHONY: all build demo test lint unit fuzz integration bench goodput classes shedding clean

all: build

build:
	$(GO) build -ldflags '-X main.revision=$(REVISION)' -o $(CQLGUARD) ./cmd/cqlguard

# demo fetches and starts a local Cassandra, runs cqlguard in front of it and
# a short workload through it, and prints what happened.
demo:
	bash test/demo.sh

# test runs everything CI runs: lint, unit and race tests (with the Redis and
# Prometheus it installs), a bounded fuzz run of every fuzz target, and the integration
# tests against a real Cassandra with gocql, ScyllaDB's gocql fork and the
# Python, Node, Java and Rust drivers, a three-node Cassandra cluster
# (test/cassandra/cluster.sh, started when a test needs it), three cqlguard processes coordinated through Redis, the
# Grafana dashboard's queries and the alerting rules against a real
# Prometheus, the Kubernetes manifests decoded strictly, and cqlguard top
# driven under tmux.
test: lint unit fuzz integration

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# lint also checks the client of ScyllaDB's gocql fork, a module of its own
# outside go.work (the fork keeps gocql's module path, which it replaces).
lint: $(STATICCHECK)
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PACKAGES)
	$(STATICCHECK) $(PACKAGES)
	cd test/drivers/scyllagocql && GOWORK=off $(GO) vet ./... && GOWORK=off $(STATICCHECK) ./...

# unit installs Redis and Prometheus first (Debian's packages,
# test/redis/redis.sh and test/prometheus/prometheus.sh): the fleet-wide
# limits' tests start their own Redis on loopback ports, and promtool tests
# every alerting rule.
unit:
	bash test/redis/redis.sh install
	bash test/prometheus/prometheus.sh install
	$(GO) test -race -count=1 $(PACKAGES)

fuzz:
	bash test/fuzz.sh $(FUZZTIME)

integration:
	CQLGUARD_INTEGRATION=1 $(GO) test -race -count=1 -timeout 40m -v ./test/... ./test/bench/...

# bench measures cqlguard against a fake upstream node, each workload direct,
# through a Go relay, an event-loop relay and HAProxy (installed first; its rows are skipped if that
# fails) and through cqlguard, the gocql rows also through cqlguard routing in
# front of a fake cluster of three nodes, and prints the tables (docs/benchmarks.md),
# the gocql rows pinned and again unpinned; about ten minutes. BENCHFLAGS passes flags to the suite, say BENCHFLAGS='-only gocql'.
bench: build
	$(GO) build -o bin/cqlguard-bench ./test/bench/cqlguard-bench
	-bash test/haproxy/haproxy.sh install
	bin/cqlguard-bench suite -cqlguard $(CQLGUARD) $(BENCHFLAGS)

clean:
	rm -rf bin

# goodput runs the goodput experiment (docs/benchmarks.md): against the
# local Cassandra it starts, pinned to a CPU of its own, a uniform read
# workload through cqlguard, then a loader hammering one partition, then
# that table's limit switched on by a reload, then its hot reads served
# (hot_reads) by another. It prints the figures and writes
# docs/goodput.png; about 3 minutes once Cassandra is up.
goodput: build
	$(GO) build -o bin/cqlguard-bench ./test/bench/cqlguard-bench
	bash test/cassandra/cassandra.sh start
	bin/cqlguard-bench goodput -cqlguard $(CQLGUARD) -upstream 127.0.0.2:9042 \
		-upstream-pid $$(bash test/cassandra/cassandra.sh pid) -out docs/goodput.png $(GOODPUTFLAGS)

# classes runs the client classes experiment (docs/benchmarks.md): against the local
# Cassandra it starts, pinned to a CPU of its own, an application of
# single-row reads and one of whole-partition reads, each a client class by
# its APPLICATION_NAME, alone and then together under equal request budgets
# and under equal request unit budgets. It prints the figures and writes
# docs/classes.png; about 3 minutes once Cassandra is up.
classes: build
	$(GO) build -o bin/cqlguard-bench ./test/bench/cqlguard-bench
	bash test/cassandra/cassandra.sh start
	bin/cqlguard-bench classes -cqlguard $(CQLGUARD) -upstream 127.0.0.2:9042 \
		-upstream-pid $$(bash test/cassandra/cassandra.sh pid) -out docs/classes.png $(CLASSESFLAGS)

# shedding runs the shedding experiment (docs/benchmarks.md): against the local
# Cassandra it starts, pinned to a CPU of its own, an interactive class of
# single-row reads (tier 0) alone, then with a batch class of
# whole-partition reads (tier 5) at a light rate the node answers easily,
# then with the batch class saturating the node, once through a cqlguard
# without shedding and once through one with it. It prints the figures
# (among them how long after the heavy batch began its tier was shed
# entirely) and writes docs/shedding.png; about 3.5 minutes once Cassandra
# is up. SHEDDINGFLAGS adds flags: '-json FILE' (each second's figures),
# '-trace FILE' (the controller's updates, as shed.ReadTrace reads them);
# a healthy node with the light batch for ten minutes, without the heavy
# phase or the half without shedding:
#   make shedding SHEDDINGFLAGS='-light-only -light-phase 10m'
shedding: build
	$(GO) build -o bin/cqlguard-bench ./test/bench/cqlguard-bench
	bash test/cassandra/cassandra.sh start
	bin/cqlguard-bench shedding -cqlguard $(CQLGUARD) -upstream 127.0.0.2:9042 \
		-upstream-pid $$(bash test/cassandra/cassandra.sh pid) -out docs/shedding.png $(SHEDDINGFLAGS)
