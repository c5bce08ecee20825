package agreement

import (
	"regexp"
	"testing"
)

// internalWords are the marks of a message written for a program, not for
// the author of a document: a protoc-gen-validate path ("invalid
// Gzip.MemoryLevel: value must be inside range"), a protobuf type name or
// type URL, a Go decoder's or reflection's own words. protobuf's "proto: "
// starts a message or follows a space: the key x-forwarded-proto is the
// author's.
var internalWords = regexp.MustCompile(`invalid [A-Z][A-Za-z0-9]*\.[A-Z]|type\.googleapis\.com|\benvoy\.(?:config|extensions|type)\.|json: cannot unmarshal|(?:^|\s)proto: |reflect:|\bpanic\b|\bnil pointer\b`)

// TestRefusalsReadAsSentences: every problem validation reports for the
// generator's documents (each item's golden inputs with keys replaced by
// values of their kind, items together, other contexts) is a sentence about
// the author's key, never a proto validator's or a decoder's message. A
// value only Envoy's proto rules refuse would reach the author as such a
// message: the item's own validation must refuse it first, in its words.
func TestRefusalsReadAsSentences(t *testing.T) {
	seeds, err := loadSeeds()
	if err != nil {
		t.Fatal(err)
	}
	docs := newGenerator(7, seeds).documents(60)
	n := len(docs)
	refused, bad := 0, 0
	for _, gen := range docs {
		v := judge(gen.src)
		if v.valid {
			continue
		}
		refused++
		for _, p := range v.problems {
			if internalWords.MatchString(p.Error()) {
				bad++
				if bad <= 10 {
					t.Errorf("a refusal in a program's words: %s\n  document made by: %v", p.Error(), gen.how)
				}
			}
		}
	}
	if refused < n/4 {
		t.Fatalf("only %d of %d generated documents were refused: the generator no longer reaches validation's refusals", refused, n)
	}
	if bad > 10 {
		t.Errorf("... and %d more", bad-10)
	}
	t.Logf("%d of %d documents refused; every message about a key", refused, n)
}
