package harness

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// BuildController builds the controller binary (with the race detector when
// race is true) into dir.
func BuildController(dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "globalconfig")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/globalconfig")...)
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build controller: %w: %s", err, out)
	}
	return bin, nil
}

// Controller is a running `globalconfig run`.
type Controller struct {
	*Process
	MetricsURL, HealthURL string
}

// StartController runs bin as the controller's ServiceAccount user against
// the cluster, with fast leader-election timing unless args override it.
func (c *Cluster) StartController(bin, name string, args ...string) (*Controller, error) {
	mp, err := FreePort()
	if err != nil {
		return nil, err
	}
	hp, err := FreePort()
	if err != nil {
		return nil, err
	}
	all := append([]string{"run",
		"--kubeconfig=" + c.ControllerKubeconfig,
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", mp),
		fmt.Sprintf("--health-addr=127.0.0.1:%d", hp),
	}, args...)
	p, err := Start(c.Dir, name, bin, all, nil)
	if err != nil {
		return nil, err
	}
	return &Controller{Process: p,
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", mp),
		HealthURL:  fmt.Sprintf("http://127.0.0.1:%d", hp),
	}, nil
}

// Metrics scrapes the controller's metrics: series (name with its labels
// as printed, e.g. `globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`)
// to value.
func (ctl *Controller) Metrics(ctx context.Context) (map[string]float64, error) {
	return Scrape(ctx, ctl.MetricsURL)
}

// Scrape reads a Prometheus text exposition at url: series (name with its
// labels as printed) to value.
func Scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// Sum adds the series of one metric name (all label sets).
func Sum(m map[string]float64, name string) float64 {
	total := 0.0
	for series, v := range m {
		if series == name || strings.HasPrefix(series, name+"{") {
			total += v
		}
	}
	return total
}

// Ready reports whether /readyz answers 200.
func (ctl *Controller) Ready(ctx context.Context) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ctl.HealthURL+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Eventually polls cond every 50 ms until it holds or timeout passes.
func Eventually(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
