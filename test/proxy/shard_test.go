package proxy

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The suite can run as several processes at once, each a shard with its
// own kube-apiserver, istiod and gateways (make test runs two): the suite
// is mostly waiting (for istiod's pushes, for a bandwidth limit's
// seconds), so two shards take about half the time on the same cores.
// GLOBALCONFIG_PROXY_SHARD=I/N makes this process shard I of N: its
// gateways bind 127.0.I.x instead of 127.0.0.x, the two long tests that
// loop over every item (TestEveryGoldenACKed, TestDeclaredTraffic) take
// every Nth of their cases, and the other tests are dealt out by their
// usual time. Unset, the process is the whole suite (0/1).
const envShard = "GLOBALCONFIG_PROXY_SHARD"

var shardIndex, shardCount = 0, 1

// readShard reads envShard; an explicit -run is respected as given, with
// the shard's own addresses.
func readShard() error {
	v := os.Getenv(envShard)
	if v == "" {
		return nil
	}
	i, n, ok := strings.Cut(v, "/")
	a, err1 := strconv.Atoi(i)
	b, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || b < 1 || a < 0 || a >= b || b > 9 {
		return fmt.Errorf("%s=%q: want I/N with 0 <= I < N <= 9", envShard, v)
	}
	shardIndex, shardCount = a, b
	return nil
}

// loopback is the shard's loopback address ending in last.
func loopback(last int) string { return fmt.Sprintf("127.0.%d.%d", shardIndex, last) }

// mine tells whether case k of a test that loops over every item is this
// shard's.
func mine(k int) bool { return k%shardCount == shardIndex }

// sharded are the tests that split their cases with mine: every shard
// runs them.
var sharded = []string{"TestEveryGoldenACKed", "TestDeclaredTraffic"}

// seconds are the tests' usual times at make test (the other tests take a
// few seconds at most), to deal them out evenly.
var seconds = map[string]float64{
	"TestServiceFailure": 40, "TestDirectCoincidentPush": 24, "TestCanaryRollout": 24, "TestDirectRollbackOnNACK": 23,
	"TestPreflightPredictsIstiod": 21, "TestMakeRun": 17, "TestSilentAndUnconnectedGateways": 17, "TestAccessLogNestedJSON": 17,
	"TestTrafficGate": 15, "TestDownstreamHTTP2Keepalive": 15, "TestAccessLog": 14, "TestNACKBlameDecidesDirect": 12,
	"TestInvisibleCanariesCount": 11, "TestExplainNamesTheCulprit": 11, "TestTracingToZipkin": 10, "TestDownstreamLimits": 9,
	"TestDeclaredFailuresAreReported": 8, "TestLoadSheddingAdmissionControl": 8, "TestCanariesMustRepresentTheChange": 7,
	"TestACKWithoutTheCanaryCopyDoesNotCount": 7, "TestNoStableSetNeverPromotes": 6, "TestCanaryOverMCP": 6,
	"TestDirectRollbackOverMCP": 6, "TestDownstreamHTTP2OnInvalidMessage": 6, "TestExampleAndEverythingACKed": 5,
}

// restrictToShard sets -test.run to this shard's tests, unless -run was
// given or the process is the whole suite. The tests are the package's
// Test functions, read from its source (the test binary runs in its
// folder), dealt out longest first to the shard with the least time.
func restrictToShard() error {
	if shardCount == 1 {
		return nil
	}
	if f := flag.Lookup("test.run"); f == nil || f.Value.String() != "" {
		return nil
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		return fmt.Errorf("shard %d/%d: the suite's sources are not in the working directory: %v", shardIndex, shardCount, err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range af.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" && !slices.Contains(sharded, fn.Name.Name) {
				names = append(names, fn.Name.Name)
			}
		}
	}
	slices.Sort(names)
	slices.SortStableFunc(names, func(a, b string) int {
		ta, tb := weight(a), weight(b)
		switch {
		case ta > tb:
			return -1
		case ta < tb:
			return 1
		}
		return 0
	})
	load := make([]float64, shardCount)
	mineNames := slices.Clone(sharded)
	for _, n := range names {
		least := 0
		for s := range load {
			if load[s] < load[least] {
				least = s
			}
		}
		load[least] += weight(n)
		if least == shardIndex {
			mineNames = append(mineNames, n)
		}
	}
	return flag.Set("test.run", "^("+strings.Join(mineNames, "|")+")$")
}

func weight(name string) float64 {
	if s, ok := seconds[name]; ok {
		return s
	}
	return 2
}
