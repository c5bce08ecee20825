// Package items is the registry of global-document items and the contract
// each item implements.
//
// An item is one top-level key of the global document ("tracing", "gzip").
// Each lives in its own package under items/, registers itself from init()
// (Register, with a Registration) and is linked into the binary by a blank
// import in items/all. CONTRIBUTING.md walks through adding one; this
// comment is the reference for what the decoder and the registry do with
// an item's declarations.
//
// # The section
//
// An item's section is a struct that embeds Toggle (the `enable` key).
// Its json tags are the document's keys and its doc tags describe them in
// the JSON Schema; the factory (Registration.New) returns it pre-filled
// with the defaults. From the field types alone the decoder reports, each
// at its path: unknown keys (with the closest known one), wrong types,
// negative values of unsigned fields and overflow. An anonymous embedded
// struct contributes its keys inline, a pointer to a struct is an optional
// sub-section, and map[string]T and []T work as expected. A pointer to a
// scalar (*uint32, *Seconds) is an optional key: nil when the document
// leaves it out, which OptionalBool, OptionalUInt32 and OptionalDuration
// turn into an unset Envoy wrapper.
//
// # Value types
//
// The capabilities of a value type (capabilities.go) are found on the type
// or its pointer, so either receiver works; by convention Values and
// SchemaTypes take a value receiver and DecodeScalar a pointer. Give every
// implementing type an interface guard.
//
//   - Enum (Values() []string): a string type with a fixed set of values;
//     anything else is refused with a suggestion. EnumNames(m) lists an
//     Envoy enum's own names from its generated _value map.
//   - ScalarDecoder (DecodeScalar(tag, value string) error) with
//     SchemaTyper (SchemaTypes() []string): a value that reads its own
//     YAML scalar. Seconds and Millis (durations; a bare number is in that
//     unit), Port (1 to 65535, a number or a numeric string) and ByteSize
//     ("10Mi") are ready-made and carry their limits into the JSON Schema.
//     A new one declares its limits from init() with
//     DeclareLimits[T](Limits{Minimum, Maximum, Pattern}), built from the
//     constants its DecodeScalar checks (the bounds apply to the number
//     form, the anchored pattern to the string form). Limits belong to
//     that exact type: a type embedding it declares its own.
//   - NodeDecoder (DecodeNode(*yaml.Node) error): a value that reads a
//     whole YAML node, whatever its kind.
//
// # Declarations read twice
//
// Each of these is declared once by the item and read by validation and by
// the JSON Schema, the generated docs or test/agreement's generator, so a
// number or a rule lives in one place:
//
//   - Ranger (Ranges() []Range): every numeric key with a fixed range,
//     from named constants: Range{Path, Min, Max, Why}, AtLeast (no
//     ceiling), DurationRange (a Seconds or Millis key), OneOf (some
//     numbers only), ErrorStatuses (an HTTP status from 400 that Envoy
//     knows). Paths go through sub-sections ("http2.maxConcurrentStreams"),
//     list elements ("perHeader[].maxTokens") and map values
//     ("buckets.*.maxTokens"); an unset optional key is not checked.
//     Validate calls CheckRanges; the schema shows minimum, maximum and
//     enum.
//   - Texter (Texts() []Text): every free-form string key and its
//     TextKind (a format string, a header name or value, a regex pattern,
//     a path, a host...). The document checks each with the one rule of
//     its kind (CheckTexts); the item does not.
//   - ContextLimiter (ContextLimits() []ContextLimit): the keys, or the
//     whole section (Path ""), that work only in some target contexts,
//     with Why. Validation refuses such a key when it is set (true,
//     non-empty, present) for another context, and docs/reference.md's
//     table "Which items work where" shows it in its own column. A
//     gateway-only item declares its whole section so, with the reason
//     once, in Why (Registration.Where says only what it does at the
//     gateway).
//   - ServiceUser (Services() []ServiceRef): the mesh services the
//     patches send to; the controller and the webhook check that each
//     exists and warn with what Envoy then does.
//   - Sharer (Claims, Exclusions): Envoy fields other items may set too;
//     the document refuses two items that conflict.
//   - Versioned (BuildFor(envoyfilter.Release)) and Registration.Needs:
//     fields only some Envoy releases know (see Versioned and Need).
//
// # Other optional interfaces
//
//   - Warner (Warnings() error): valid settings a user should know about,
//     with paths, as Validate returns problems.
//   - SecretHolder (Secrets() []string): values scrubbed from logs,
//     Events and the status. Never put a secret's value in a message.
//   - ServiceConfigurer: the configuration a service (the rate-limit
//     service) must be given to match the patches.
//
// # Validation helpers
//
// Problems collects every problem with its path relative to the section
// (p.Addf("path", "must ..., got %q", v); "" for the section itself) and
// p.Err() returns them joined, nil when there is none; the document
// prefixes the item's name and adds the line. CheckHeader is the one rule
// for a header an item sets; RequireSomething refuses an enabled section
// that sets nothing besides enable.
//
// # Target
//
// An item never reads the document's target: the document takes an
// item's own target out of its section and merges it over the top-level
// one, and the renderer gives each patch its context and proxy version
// from that, and runs every value through envoyfilter.Check. Golden
// outputs (test/goldentest) are rendered with only their item linked, so
// adding an item changes no other item's outputs.
//
// # Registration
//
// Register panics, at init, on an empty or duplicate name, a missing
// factory, stage, Purpose or Where, an item that does not embed Toggle, a
// slot out of range or taken (naming the free ones), or a name that can't
// make a valid object name: each is a programming error that must not
// reach a running controller. The item's name becomes its EnvoyFilter's
// name in kebab case (localRateLimit → globalconfig-local-rate-limit).
// Registration.TopLevel maps a key Higress keeps at the top of its
// document to one of the item's (headers: disableXEnvoyHeaders).
// Registration.Provides names the Envoy capabilities the item emits, so
// that a converter's verdict that called one missing names the item
// instead (pkg/convert/gap); Register panics on a name the binary's Envoy
// API lacks or a setting the section lacks.
package items
