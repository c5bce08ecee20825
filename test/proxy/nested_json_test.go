package proxy

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// accessLog.json with nested objects, a list, a number and a boolean (an
// ECS-style line): each gateway writes the line as the author shaped it,
// the format strings substituted at their depth, the other values as
// they are.
func TestAccessLogNestedJSON(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, `accessLog:
  path: /dev/stdout
  json:
    http:
      request: {method: "%REQ(:METHOD)%", path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"}
      response: {status_code: "%RESPONSE_CODE%"}
    event: {kind: event, category: [web, network], severity: 0, sampled: true}
  minStatusCode: 400
`)
	each(t, func(t *testing.T, g *gw) {
		want := "/status?code=404&nested=yes-" + g.name
		mustGet(ctx, t, g.url(want), nil)
		var line string
		ok := harness.Eventually(ctx, 15*time.Second, func() bool {
			data, _ := os.ReadFile(g.LogPath)
			for _, l := range strings.Split(string(data), "\n") {
				if strings.HasPrefix(l, "{") && strings.Contains(l, want) {
					line = l
					return true
				}
			}
			return false
		})
		if !ok {
			t.Fatalf("no access log line for %s in %s", want, g.LogPath)
		}
		var entry struct {
			HTTP struct {
				Request  map[string]any `json:"request"`
				Response map[string]any `json:"response"`
			} `json:"http"`
			Event map[string]any `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if entry.HTTP.Request["method"] != "GET" || entry.HTTP.Request["path"] != want {
			t.Errorf("http.request = %v, want method GET and path %s (line %s)", entry.HTTP.Request, want, line)
		}
		if code := entry.HTTP.Response["status_code"]; code != 404.0 && code != "404" {
			t.Errorf("http.response.status_code = %#v, want 404 (line %s)", code, line)
		}
		wantEvent := map[string]any{"kind": "event", "category": []any{"web", "network"}, "severity": 0.0, "sampled": true}
		if !reflect.DeepEqual(entry.Event, wantEvent) {
			t.Errorf("event = %#v, want %#v as written (line %s)", entry.Event, wantEvent, line)
		}
	})
}
