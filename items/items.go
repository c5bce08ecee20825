package items

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Item is the decoded section of one item. The document decoder fills the
// value returned by the item's factory, so the struct's json tags are the
// document's key names and its pre-filled values are the defaults.
//
// Items are pure: Validate and Build do no I/O, read no clock and return the
// same output for the same input.
type Item interface {
	// Enabled reports whether the item generates anything. A disabled item
	// is still validated. Embed Toggle to implement it.
	Enabled() bool
	// Validate returns every problem of the section, each a
	// *fielderr.Error with a path relative to the section, joined.
	Validate() error
	// Build returns the patches that put the section into effect. It is
	// only called on a valid, enabled item.
	Build() ([]envoyfilter.Patch, error)
}

// Registration describes one item to the registry.
type Registration struct {
	// Name is the item's top-level key in the document.
	Name string
	// Summary is one line for `globalconfig items` and the JSON Schema.
	Summary string
	// Stage is the item's layer, from the table in envoyfilter/priority.go:
	// it decides the EnvoyFilter's priority range and where inserted HTTP
	// filters go.
	Stage envoyfilter.Stage
	// Slot is the item's place in its stage, 0 to its stage's Width-1, chosen
	// for what it does there: slot 0's filters come first in the chain.
	// No two items share a slot; the priority follows from the slot alone
	// (Stage.At), so adding or renaming an item never moves another.
	Slot int
	// Purpose says why the item sits in its slot, for `globalconfig
	// items` and the docs: "refuses requests by client address".
	Purpose string
	// Where says what the item patches, and what that means in the target
	// contexts it works in (a gateway; a sidecar's inbound and outbound
	// listeners), for docs/reference.md's table "Which items work where"
	// (ContextTable). It does not say where the item is refused, nor why:
	// ContextLimits declares that (the whole section, path "", or some
	// keys), and the table shows its Why in a column of its own.
	Where string
	// EnabledByDefault says whether a section present in the document
	// generates its EnvoyFilter without `enable: true`.
	EnabledByDefault bool
	// New returns a fresh item with its defaults (Toggle aside: the
	// registry sets it from EnabledByDefault).
	New func() Item
	// TopLevel maps document-level keys to keys of this item, for settings
	// Higress keeps at the top of its document (disableXEnvoyHeaders:
	// true is headers.disableXEnvoyHeaders: true). Using one creates the
	// section if it is absent.
	TopLevel map[string]string
	// Needs lists the settings that need a newer Istio than the oldest
	// globalconfig knows (see Versioned).
	Needs []Need
	// Provides names Envoy capabilities the item emits, so that a
	// converter that reports one as missing from globalconfig (Envoy's
	// bandwidth_limit filter, for ingress-nginx's limit-rate) names this
	// item instead, by itself (pkg/convert/gap). List what the item's
	// golden outputs emit and a converter may name; pkg/convert's tests
	// fail when an item emits a capability a converter calls missing
	// without declaring it here, and when a declared one is emitted by
	// none of the item's golden outputs.
	Provides []Capability
}

// Capability is one Envoy capability an item emits, as a converter names
// it.
type Capability struct {
	// Envoy is the full name of a proto message
	// ("envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit"),
	// optionally followed by a path of its fields
	// ("envoy.config.listener.v3.Listener.listener_filters_timeout"): the
	// field set inside that message, wherever the message is.
	Envoy string
	// Setting is the document key that sets it, relative to the section
	// ("maxResponseHeadersKb"); empty for the section itself.
	Setting string
}

// CheckEnvoyName reports why name is not the full name of a proto message
// the binary links, optionally followed by a path of that message's fields
// (the form of Capability.Envoy).
func CheckEnvoyName(name string) error {
	parts := strings.Split(name, ".")
	for i := len(parts); i > 0; i-- {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(strings.Join(parts[:i], ".")))
		if err != nil {
			continue
		}
		md, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			continue // a field's own name: its message is a shorter prefix
		}
		for _, f := range parts[i:] {
			if md == nil {
				return fmt.Errorf("%q: the field before %q is not a message, so it has no fields", name, f)
			}
			fd := md.Fields().ByName(protoreflect.Name(f))
			if fd == nil {
				return fmt.Errorf("%q: %s has no field %q", name, md.FullName(), f)
			}
			md = fd.Message()
		}
		return nil
	}
	return fmt.Errorf("%q names no proto message the binary links: give a message's full name (import the go-control-plane package that defines it), optionally followed by a path of its fields", name)
}

// NewItem returns a fresh item with every default, `enable` included.
func (r Registration) NewItem() Item {
	it := r.New()
	if t, ok := it.(toggled); ok {
		t.toggle().Enable = r.EnabledByDefault
	}
	return it
}

// Placement is where the item's EnvoyFilter goes: its slot's priority in
// its stage, and the stage's insert position.
func (r Registration) Placement() envoyfilter.Placement { return r.Stage.At(r.Slot) }

var (
	mu       sync.RWMutex
	registry = map[string]Registration{}
)

// Register adds an item. It is meant to be called from init(); an empty
// name, a missing factory or stage, an item that does not embed Toggle, a
// slot out of range, taken or without a purpose, or a name registered
// twice panics, because each is a
// programming error that must not reach a running controller.
func Register(r Registration) {
	if r.Name == "" {
		panic("items: Register with an empty name")
	}
	if r.New == nil {
		panic(fmt.Sprintf("items: Register %q without a factory", r.Name))
	}
	if !slices.Contains(envoyfilter.Stages(), r.Stage) {
		panic(fmt.Sprintf("items: %q has no stage from envoyfilter.Stages()", r.Name))
	}
	if _, ok := r.New().(toggled); !ok {
		panic(fmt.Sprintf("items: %q does not embed items.Toggle", r.Name))
	}
	if msgs := validation.IsDNS1123Subdomain(envoyfilter.ObjectName(r.Name)); len(msgs) > 0 {
		panic(fmt.Sprintf("items: %q does not make a valid object name: %v", r.Name, msgs))
	}
	if strings.HasSuffix(envoyfilter.ObjectName(r.Name), envoyfilter.CanarySuffix) {
		panic(fmt.Sprintf("items: %q makes an object name ending in %q, which a canary rollout gives another item's new version", r.Name, envoyfilter.CanarySuffix))
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[r.Name]; dup {
		panic(fmt.Sprintf("items: %q registered twice", r.Name))
	}
	if r.Slot < 0 || r.Slot >= r.Stage.Width {
		panic(fmt.Sprintf("items: %q: slot %d of stage %s is not between 0 and %d", r.Name, r.Slot, r.Stage.Name, r.Stage.Width-1))
	}
	if r.Purpose == "" {
		panic(fmt.Sprintf("items: %q has no Purpose for its slot", r.Name))
	}
	if r.Where == "" {
		panic(fmt.Sprintf("items: %q does not say Where it works", r.Name))
	}
	for _, c := range r.Provides {
		if err := CheckEnvoyName(c.Envoy); err != nil {
			panic(fmt.Sprintf("items: %q Provides %v", r.Name, err))
		}
		if c.Setting == "" {
			continue
		}
		if err := checkKeysType(reflect.TypeOf(r.New()), strings.Split(c.Setting, ".")); err != nil {
			panic(fmt.Sprintf("items: %q Provides %s at setting %q, which is not a key of its section: %v", r.Name, c.Envoy, c.Setting, err))
		}
	}
	for name, other := range registry {
		if other.Stage.Name == r.Stage.Name && other.Slot == r.Slot {
			var free []string
			for _, slot := range freeSlots(r.Stage) {
				free = append(free, strconv.Itoa(slot))
			}
			panic(fmt.Sprintf("items: %q and %q share slot %d of stage %s; take a free one where the filter belongs: %s", r.Name, name, r.Slot, r.Stage.Name, strings.Join(free, ", ")))
		}
	}
	registry[r.Name] = r
}

// FreeSlots lists the slots of stage st that no registered item takes, in
// order: where a new item of the stage can go.
func FreeSlots(st envoyfilter.Stage) []int {
	mu.Lock()
	defer mu.Unlock()
	return freeSlots(st)
}

// freeSlots is FreeSlots with mu held.
func freeSlots(st envoyfilter.Stage) []int {
	var free []int
	for slot := range st.Width {
		taken := false
		for _, r := range registry {
			taken = taken || (r.Stage.Name == st.Name && r.Slot == slot)
		}
		if !taken {
			free = append(free, slot)
		}
	}
	return free
}

// Lookup returns the registration of name.
func Lookup(name string) (Registration, bool) {
	mu.RLock()
	defer mu.RUnlock()
	r, ok := registry[name]
	return r, ok
}

// All returns every registration, sorted by name.
func All() []Registration {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]Registration, 0, len(registry))
	for _, name := range slices.Sorted(maps.Keys(registry)) {
		out = append(out, registry[name])
	}
	return out
}

// Warner is implemented by items that can say something about a valid
// section a user should know: a setting that overrides more than it
// seems to. Warnings() returns each as a *fielderr.Error with a path
// relative to the section, joined, as Validate does; `globalconfig
// validate`, the admission webhook and the status report them. It is only
// asked of an enabled item.
type Warner interface {
	Warnings() error
}

// Versioned is implemented by items whose patches depend on the Envoy
// the proxies run: a field only newer Envoys know, or one newer Envoys
// prefer. BuildFor is Build for the proxies of one Istio release; the
// renderer calls it for every release of the target's fleet
// (target.istioVersions) and scopes the patches that differ to their
// releases with match.proxy.proxyVersion. When a setting can't be put
// into effect on r at all, BuildFor returns a *fielderr.Error with the
// path of that setting, relative to the section; the renderer adds the
// releases it fails for; its message is NeedsMsg(v), v the oldest Envoy
// that has the setting. Build returns BuildFor(envoyfilter.Newest()), and
// BuildFor picks each field's shape with r.Envoy.AtLeast(v).
//
// An item with a Versioned field declares it in Registration.Needs, so
// `globalconfig items` and docs/versions.md can show it; `make compat` checks
// that what BuildFor emits for each release decodes with that release's
// Envoy API.
type Versioned interface {
	BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error)
}

// Need is an optional setting of an item that needs a newer Istio than the
// item itself, and what older proxies get instead.
type Need struct {
	// Setting is the document path, relative to the section
	// ("zipkin.w3c").
	Setting string
	// Field is the Envoy field it generates on newer proxies
	// ("trace_context_option").
	Field string
	// Envoy is the oldest Envoy release that understands what the
	// setting generates; the Istio release follows from
	// envoyfilter.Releases.
	Envoy envoyfilter.Version
	// Older says what proxies of older releases get: a fallback, or that
	// validation refuses the setting for them.
	Older string
}

// ServiceConfigurer is implemented by items whose patches call a service
// that must be configured to match them: the global rate limit's
// descriptors and the rate-limit service's limits. ServiceConfig is asked
// of an enabled, valid item; the renderer keeps what it returns with the
// item's EnvoyFilter (envoyfilter.AnnotationServiceConfig), so the service
// is given exactly what the proxies are given, canary copies and rollbacks
// included. What it returns must also show in the patches (a descriptor
// value that names the limit and a hash of it), so that a change of one is
// a change of the EnvoyFilter.
type ServiceConfigurer interface {
	ServiceConfig() (proto.Message, error)
}

// SecretHolder is implemented by items whose sections carry secret values
// (tokens). The controller scrubs those values from every message it logs
// or records in Events and the status, since an API server error or an
// istiod rejection may quote the configuration.
type SecretHolder interface {
	Secrets() []string
}

// Toggle is the `enable` key every item has. Embed it in the item struct;
// its default is the registration's EnabledByDefault.
type Toggle struct {
	Enable bool `json:"enable" doc:"Whether the item generates its EnvoyFilter."`
}

// Enabled implements Item.
func (t Toggle) Enabled() bool { return t.Enable }

func (t *Toggle) toggle() *Toggle { return t }

type toggled interface{ toggle() *Toggle }
