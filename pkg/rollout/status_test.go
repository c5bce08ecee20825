package rollout

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A status of a fleet with many NACKs, each with a long message, and
// long lists of silent and unconnected proxies is cut to MaxBytes: the
// counts stay whole, NACKed proxies go last, and what is left out is
// counted.
func TestFitCutsToMaxBytes(t *testing.T) {
	st := &Status{Version: "v", Selected: 5000, NACKed: MaxListed, Synced: 5000 - MaxListed}
	for i := range MaxListed {
		st.Proxies = append(st.Proxies, Proxy{Name: fmt.Sprintf("gw-%03d.istio-ingress", i), Type: "router", State: NACKed,
			Message: strings.Repeat("listener 0.0.0.0_80 refused: lua script does not load ", 20)[:MaxMessage]})
	}
	st.Unlisted = st.Selected - len(st.Proxies)
	for i := range MaxListed {
		st.Silent = append(st.Silent, Silent{Name: fmt.Sprintf("app-%03d.team-1", i), Type: "sidecar"})
		st.Unconnected = append(st.Unconnected, Unconnected{Name: fmt.Sprintf("app-%03d.team-2", i), Type: "sidecar"})
	}
	first := st.Proxies[0].Message
	if !st.Fit(MaxBytes) {
		t.Fatal("Fit cut nothing from a status far over MaxBytes")
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxBytes {
		t.Errorf("after Fit the status is %d bytes, over %d", len(b), MaxBytes)
	}
	if st.Selected != 5000 || st.NACKed != MaxListed || st.Synced != 5000-MaxListed {
		t.Errorf("Fit changed the counts: %d selected, %d NACKed, %d synced", st.Selected, st.NACKed, st.Synced)
	}
	if len(st.Proxies) == 0 || st.Proxies[0].Name != "gw-000.istio-ingress" || st.Proxies[0].Message != first {
		t.Errorf("the first NACKed proxy and its whole message should stay: %+v", st.Proxies[:min(1, len(st.Proxies))])
	}
	for _, p := range st.Proxies[1:] {
		if n := len([]rune(p.Message)); n > fitMessage {
			t.Errorf("%s: message of %d characters after Fit, want at most %d", p.Name, n, fitMessage)
		}
	}
	if st.Unlisted != st.Selected-len(st.Proxies) {
		t.Errorf("unlisted %d, want %d", st.Unlisted, st.Selected-len(st.Proxies))
	}
	if len(st.Silent)+st.SilentUnlisted != MaxListed || len(st.Unconnected)+st.UnconnectedUnlisted != MaxListed {
		t.Errorf("silent %d+%d, unconnected %d+%d: want %d each", len(st.Silent), st.SilentUnlisted, len(st.Unconnected), st.UnconnectedUnlisted, MaxListed)
	}
	if !strings.Contains(st.Summary(), fmt.Sprintf("%d silent", MaxListed)) {
		t.Errorf("summary %q does not count every silent proxy", st.Summary())
	}
	// A small status is left as it is.
	small := &Status{Version: "v", Selected: 1, Synced: 1, Proxies: []Proxy{{Name: "gw.istio-ingress", State: Synced}}}
	if small.Fit(MaxBytes) || len(small.Proxies) != 1 {
		t.Error("Fit cut a small status")
	}
}
