// Package fielderr is the error type every layer of globalconfig uses to say
// what is wrong with the global document and where: a dotted path into the
// document ("gzip.chunkSize", "tracing.customTags[env]") and a message.
//
// Items, the envoyfilter renderer and the document decoder all report through
// it, so one document with many problems yields one list with every problem.
package fielderr

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem at one place of the document.
type Error struct {
	// Path is the dotted path of the offending key, relative to whoever
	// produced the error; callers prefix it as the error travels up.
	Path string
	// Line is the 1-based line of the key in the source, 0 when unknown.
	Line int
	// Msg says what is wrong, in lower case, without the path.
	Msg string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// List collects problems. The zero value is ready to use.
type List struct {
	errs []*Error
}

// Addf records a problem at path.
func (l *List) Addf(path, format string, args ...any) {
	l.errs = append(l.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Add records err at path. Field errors inside err keep their own paths,
// prefixed with path; any other error becomes one problem at path.
func (l *List) Add(path string, err error) {
	for _, fe := range Flatten(err) {
		l.errs = append(l.errs, &Error{Path: Join(path, fe.Path), Line: fe.Line, Msg: fe.Msg})
	}
}

// Len reports how many problems were recorded.
func (l *List) Len() int { return len(l.errs) }

// Err returns nil when no problem was recorded, or all of them joined.
func (l *List) Err() error {
	if len(l.errs) == 0 {
		return nil
	}
	errs := make([]error, len(l.errs))
	for i, e := range l.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Key appends a mapping key to path as problems name it: keys that would
// read ambiguously after a dot (label keys such as app.kubernetes.io/name)
// are bracketed and quoted.
func Key(path, key string) string {
	if key == "" || strings.ContainsAny(key, `./[]" `) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	return Join(path, key)
}

// Join joins two path segments with a dot; an index segment ("[2]") or an
// empty side is joined without one.
func Join(prefix, path string) string {
	switch {
	case prefix == "":
		return path
	case path == "":
		return prefix
	case strings.HasPrefix(path, "["):
		return prefix + path
	}
	return prefix + "." + path
}

// Flatten turns any error into field errors: joined errors are unwrapped
// recursively, an *Error is kept, and anything else becomes an *Error with an
// empty path. A nil error gives nil.
func Flatten(err error) []*Error {
	if err == nil {
		return nil
	}
	if fe, ok := err.(*Error); ok {
		return []*Error{fe}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, e := range j.Unwrap() {
			out = append(out, Flatten(e)...)
		}
		return out
	}
	return []*Error{{Msg: err.Error()}}
}

// Sort orders problems by line, then path, so reports read top to bottom.
func Sort(errs []*Error) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i], errs[j]
		if a.Line != b.Line {
			// Problems without a line go last.
			if a.Line == 0 || b.Line == 0 {
				return b.Line == 0
			}
			return a.Line < b.Line
		}
		return a.Path < b.Path
	})
}
