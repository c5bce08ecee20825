package envoycheck

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// The htpasswd stand-in is shared by every check running at once, while
// their Envoys read it: a file that holds the stand-in already is left as
// it is (the same inode, never truncated), and one that doesn't is
// replaced whole.
func TestStandInIsNeverRewrittenInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "htpasswd")
	inode := func() uint64 {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	if err := writeStandIn(path, []byte("a:b\n")); err != nil {
		t.Fatal(err)
	}
	first := inode()
	if err := writeStandIn(path, []byte("a:b\n")); err != nil {
		t.Fatal(err)
	}
	if inode() != first {
		t.Error("the stand-in was written again though it held the same bytes")
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeStandIn(path, []byte("a:b\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "a:b\n" {
		t.Errorf("an emptied stand-in: %q, %v; want it replaced", got, err)
	}
}

// Checks at once of a basicAuth.usersFile document, as the webhook and
// test/agreement run them: each loads. When each check rewrote the
// shared stand-in in place, about 1 in 14 Envoys read it empty and
// refused the document ("file …/mounted/htpasswd is empty").
func TestConcurrentChecksShareTheStandIn(t *testing.T) {
	bin := openEnvoy(t)
	doc, err := document.Parse([]byte("basicAuth:\n  usersFile: /etc/basic-auth/htpasswd\n"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Desired(doc)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var refused []string
	for range 8 {
		wg.Go(func() {
			for range 10 {
				msg, err := Verdict(context.Background(), bin, objs)
				if err != nil || msg != "" {
					mu.Lock()
					refused = append(refused, msg)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(refused) > 0 {
		t.Errorf("%d of 80 checks at once refused the document: %s", len(refused), refused[0])
	}
}
