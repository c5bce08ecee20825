# globalconfig — see README.md.
#
#   make test    vet, then every test with the race detector
#   make run     the main job (for now: render the example ConfigMap)
#   make bench   benchmarks, figures printed
#   make fuzz    a bounded run of the document fuzzer

GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 30s
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/globalconfig/globalconfig/pkg/cli.Version=$(VERSION)

.PHONY: all build test vet run bench fuzz golden clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/globalconfig ./cmd/globalconfig

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...

test: vet
	$(GO) test -race -count=1 ./...

run: build
	$(BIN)/globalconfig render -f deploy/examples/global-config.yaml

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	$(GO) test ./pkg/document -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)

# Rewrite golden outputs after an intended change; review the diff.
golden:
	$(GO) test ./items/... -update

clean:
	rm -rf $(BIN)
