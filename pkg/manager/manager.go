// Package manager turns a valid global document into the desired set of
// EnvoyFilters and tells what changed between two documents.
package manager

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// Desired builds one EnvoyFilter per enabled item of doc, sorted by name.
// A build or check failure of any item fails the whole set (nothing is
// published half-done); the error is a *document.Error listing every
// failing item under its name.
func Desired(doc *document.Document) ([]*envoyfilter.Object, error) {
	var (
		out  []*envoyfilter.Object
		errs fielderr.List
	)
	for _, s := range doc.Sections {
		if !s.Item.Enabled() {
			continue
		}
		patches, err := s.Item.Build()
		if err != nil {
			errs.Add(s.Name, err)
			continue
		}
		obj, err := envoyfilter.NewObject(s.Name, s.Placement, s.Target, patches)
		if err != nil {
			errs.Add(s.Name, err)
			continue
		}
		out = append(out, obj)
	}
	if errs.Len() > 0 {
		return nil, &document.Error{Problems: fielderr.Flatten(errs.Err())}
	}
	return out, nil
}

// YAML writes objects as one YAML stream, "---" between documents.
func YAML(objs []*envoyfilter.Object) ([]byte, error) {
	var b bytes.Buffer
	for i, o := range objs {
		y, err := o.YAML()
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", o.Metadata.Name, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// Change is the difference between the last applied document and a new one.
type Change struct {
	// Added, Changed and Removed name items whose EnvoyFilter appears,
	// differs or disappears, sorted.
	Added, Changed, Removed []string
	// Desired is the full set the new document asks for.
	Desired []*envoyfilter.Object
}

// Empty reports whether nothing changed.
func (c Change) Empty() bool { return len(c.Added)+len(c.Changed)+len(c.Removed) == 0 }

// Diff compares the EnvoyFilters of two documents. Equality is semantic: it
// compares what would be published (content hash, name and namespace), so
// reordered keys, comments or a spelled-out default change nothing. prev
// may be nil (nothing applied yet).
func Diff(prev, next *document.Document) (Change, error) {
	var before []*envoyfilter.Object
	if prev != nil {
		var err error
		if before, err = Desired(prev); err != nil {
			return Change{}, fmt.Errorf("previous document: %w", err)
		}
	}
	after, err := Desired(next)
	if err != nil {
		return Change{}, err
	}
	return Compare(before, after), nil
}

// Compare tells how the set after differs from before, by item.
func Compare(before, after []*envoyfilter.Object) Change {
	old := map[string]*envoyfilter.Object{}
	for _, o := range before {
		old[o.Item()] = o
	}
	c := Change{Desired: after}
	for _, o := range after {
		prev, ok := old[o.Item()]
		switch {
		case !ok:
			c.Added = append(c.Added, o.Item())
		case prev.Hash() != o.Hash() || prev.Metadata.Namespace != o.Metadata.Namespace:
			c.Changed = append(c.Changed, o.Item())
		}
		delete(old, o.Item())
	}
	for _, o := range before {
		if _, gone := old[o.Item()]; gone {
			c.Removed = append(c.Removed, o.Item())
		}
	}
	return c
}

// FromConfigMap renders the document in a ConfigMap's data: the desired
// set, or every problem (problems is nil exactly when the document is
// valid). The controller and the admission webhook both decide with it.
func FromConfigMap(data map[string]string) ([]*envoyfilter.Object, []*fielderr.Error) {
	objs, _, problems := Render(data)
	return objs, problems
}

// Render is FromConfigMap that also returns the document's secret values
// (see items.SecretHolder), for scrubbing messages.
func Render(data map[string]string) (objs []*envoyfilter.Object, secrets []string, problems []*fielderr.Error) {
	src, ok := data[document.DataKey]
	if !ok {
		return nil, nil, []*fielderr.Error{{Msg: fmt.Sprintf("the ConfigMap has no data key %q", document.DataKey)}}
	}
	doc, err := document.Parse([]byte(src))
	if err == nil {
		for _, s := range doc.Sections {
			if h, ok := s.Item.(items.SecretHolder); ok {
				secrets = append(secrets, h.Secrets()...)
			}
		}
		if objs, err = Desired(doc); err == nil {
			return objs, secrets, nil
		}
	}
	var de *document.Error
	if errors.As(err, &de) {
		return nil, secrets, de.Problems
	}
	return nil, secrets, fielderr.Flatten(err)
}

// Scrub replaces every secret value in msg.
func Scrub(msg string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}

// Describe writes problems one per entry as "path: message (config.yaml
// line N)", joined by sep: the form Events, the status and admission
// denials use.
func Describe(problems []*fielderr.Error, sep string) string {
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.Error()
		if p.Line > 0 {
			lines[i] += fmt.Sprintf(" (%s line %d)", document.DataKey, p.Line)
		}
	}
	return strings.Join(lines, sep)
}
