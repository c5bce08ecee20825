package agreement

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/emitcheck"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"go.yaml.in/yaml/v3"
)

// TestOutputWalkPassesWhatValidationAdmits is the property behind the
// output walk (pkg/emitcheck): for every document validation admits (every
// valid golden input, the example, and the documents the generator makes),
// every regex, format string, file path and header in what the items build
// passes the walk for every Istio release of each section's fleet. A
// refusal here is a value an item builds that its input rules let
// through: a bug in the item or in validation. No Envoy needed.
func TestOutputWalkPassesWhatValidationAdmits(t *testing.T) {
	seeds, err := loadSeeds()
	if err != nil {
		t.Fatal(err)
	}
	type doc struct {
		src []byte
		how string
	}
	var docs []doc
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range seeds {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, s := range seeds[name] {
			src, err := yaml.Marshal(s.doc)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, doc{src, "golden " + name + "/" + s.file})
		}
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	example, err := os.ReadFile(root + "/deploy/examples/global-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(example, &cm); err != nil || cm.Data[document.DataKey] == "" {
		t.Fatalf("the example ConfigMap: %v", err)
	}
	docs = append(docs, doc{[]byte(cm.Data[document.DataKey]), "deploy/examples/global-config.yaml"})
	perItem := docsPerItem
	if s := os.Getenv("GLOBALCONFIG_AGREEMENT_PER_ITEM"); s != "" {
		if perItem, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	g := newGenerator(1, seeds)
	for _, gen := range g.documents(perItem) {
		docs = append(docs, doc{gen.src, strings.Join(gen.how, "; ")})
	}
	// And host and method lists as users write them, long ones too.
	for _, name := range g.listItems() {
		for i := range 100 {
			gen := g.listDocument(name, i)
			docs = append(docs, doc{gen.src, strings.Join(gen.how, "; ")})
		}
	}

	kinds := map[emitcheck.Kind]int{}
	admitted, longLists := 0, 0
	for _, d := range docs {
		parsed, err := document.Parse(d.src)
		if err != nil {
			continue // refused by validation: nothing is emitted
		}
		admitted++
		for _, s := range parsed.Sections {
			if !s.Item.Enabled() {
				continue
			}
			for _, r := range refusals(t, s, kinds) {
				t.Errorf("%s: %s.%s", d.how, s.Name, r)
			}
		}
		if strings.Contains(d.how, "entries") {
			longLists++
		}
	}
	t.Logf("%d documents, %d admitted (%d with a generated host or method list); values walked by kind: %v", len(docs), admitted, longLists, kinds)
	for _, k := range []emitcheck.Kind{emitcheck.Regex, emitcheck.Format, emitcheck.HeaderName, emitcheck.HeaderValue, emitcheck.ProxyFile} {
		if kinds[k] == 0 {
			t.Errorf("no value of kind %d was walked: the property holds of nothing", k)
		}
	}
}

// refusals are what the walk refuses in what section s builds for each
// release of its fleet that the item builds for.
func refusals(t *testing.T, s document.Section, kinds map[emitcheck.Kind]int) []string {
	t.Helper()
	c := emitcheck.NewChecker()
	var out []string
	for _, istio := range s.Target.Fleet() {
		envoy, err := envoyfilter.EnvoyOf(istio)
		if err != nil {
			t.Fatal(err)
		}
		var patches []envoyfilter.Patch
		if v, ok := s.Item.(items.Versioned); ok {
			patches, err = v.BuildFor(envoyfilter.Release{Istio: istio, Envoy: envoy})
		} else {
			patches, err = s.Item.Build()
		}
		if err != nil {
			continue // this release is refused by the item itself, with its reason
		}
		msgs := make([]proto.Message, len(patches))
		for i, p := range patches {
			msgs[i] = p.Value
		}
		values := c.Values(msgs)
		for _, v := range values {
			kinds[v.Kind]++
		}
		for _, r := range c.Check(values, envoy) {
			out = append(out, fmt.Sprintf("(Istio %s) %s", istio, r.Msg))
		}
	}
	return out
}

// issue41Lists is issue 41's document: six ordinary host names and twenty
// methods, each over Envoy's RE2 limit as one regex.
const issue41Lists = `
target: {context: GATEWAY}
globalRateLimit:
  service: ratelimit.ratelimit.svc.cluster.local
  port: 8081
  limits:
    storefront:
      requests: 100
      unit: minute
      match:
        hosts: [api.example.com, www.example.com, shop.example.com, checkout.example.com, accounts.example.com, login.example.com]
    webdav:
      requests: 10
      unit: second
      perClient: true
      match:
        pathPrefix: /dav
        methods: [GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK, REPORT, SEARCH, PURGE, LINK]
`

// TestHostAndMethodListsAgreeWithEnvoy: issue 41's six hosts and twenty
// methods are admitted and both real Envoys load what render emits for
// them; so do generated lists, short and long, and what validation
// refuses of them is refused by Envoy too or deliberately.
func TestHostAndMethodListsAgreeWithEnvoy(t *testing.T) {
	bins := envoys(t)
	seeds, err := loadSeeds()
	if err != nil {
		t.Fatal(err)
	}
	v := judge([]byte(issue41Lists))
	if !v.valid {
		t.Fatalf("issue 41's document is refused: %v", v.problems)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, b := range bins {
		msg, err := envoycheck.Verdict(ctx, b, v.objs)
		if err != nil {
			t.Fatal(err)
		}
		if msg != "" {
			t.Errorf("Envoy %s refuses what render emits for issue 41's document: %s", b.Version, msg)
		}
	}
	g := newGenerator(41, seeds)
	o := &outcome{skipped: map[string]int{}, deliberate: map[string]int{}}
	for _, name := range g.listItems() {
		for i := range 20 {
			if err := o.check(ctx, bins, g.listDocument(name, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d list documents: %d admitted, %d refused; admitted and loaded %d, refused by both %d; deliberate %v", o.docs, o.admitted, o.refused, o.both, o.bothRefuse, o.deliberate)
	if o.admitted == 0 || o.both == 0 {
		t.Error("no generated list document was admitted and loaded: the test proves nothing")
	}
	for _, d := range o.disagreements {
		t.Errorf("envoy %s: %s\n  made by: %s\n%s", d.envoy, d.what, strings.Join(d.gen.how, "; "), indent(string(d.gen.src)))
	}
}
