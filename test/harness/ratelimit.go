package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/rlsconfig"
	"github.com/globalconfig/globalconfig/test/toolcache"
)

// RateLimitService is the reference rate-limit service
// (envoyproxy/ratelimit) with its Redis, on loopback, configured over xDS
// by globalconfig's own configuration server (pkg/rlsconfig), as the
// controller's --ratelimit-config-addr serves it.
type RateLimitService struct {
	Redis, Service *Process
	// GRPCPort is the service's gRPC port (Envoy's ratelimit filter calls
	// it), HTTPPort its HTTP one (/healthcheck, /json).
	GRPCPort, HTTPPort int
	// Config serves the service its configuration; Publish a set to it.
	Config *rlsconfig.Server
	grpc   *grpc.Server
	dir    string
	env    []string
	bin    string
}

// StartRateLimitService starts Redis (GLOBALCONFIG_REDIS), a configuration
// server with nothing in it yet, and the rate-limit service
// (GLOBALCONFIG_RATELIMIT) reading from both, and waits until the service
// answers. Counters are kept apart from any other run by a key prefix.
func StartRateLimitService(ctx context.Context, dir string) (*RateLimitService, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg := rlsconfig.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := grpc.NewServer()
	cfg.Register(srv)
	go func() { _ = srv.Serve(ln) }()
	// The service starts once it has a configuration: an empty one.
	if _, err := cfg.Publish(nil); err != nil {
		srv.Stop()
		return nil, err
	}
	r, err := startRateLimit(ctx, dir, ln.Addr().String(), "globalconfig-test", 0,
		"CACHE_KEY_PREFIX="+strconv.FormatInt(time.Now().UnixNano(), 36)+"_")
	if err != nil {
		srv.Stop()
		return nil, err
	}
	r.Config, r.grpc = cfg, srv
	return r, nil
}

// StartRateLimitServiceFrom starts Redis (GLOBALCONFIG_REDIS) and the
// rate-limit service (GLOBALCONFIG_RATELIMIT) configured over xDS by the
// server at configAddr (host:port): a controller's own
// --ratelimit-config-addr, as deploy/examples/ratelimit wires it. The
// service starts once that server has served it a configuration (the
// controller does once it has applied a document), so start the
// controller first; Config is nil (the controller publishes the limits).
// The service's gRPC port is grpcPort, or one picked free when 0 (a port
// known in advance lets a ServiceEntry name it before the service runs).
func StartRateLimitServiceFrom(ctx context.Context, dir, configAddr string, grpcPort int) (*RateLimitService, error) {
	return startRateLimit(ctx, dir, configAddr, "globalconfig-sandbox", grpcPort)
}

// startRateLimit starts Redis and the rate-limit service configured by
// the xDS server at configAddr as node nodeID, on gRPC port grpcPort (a
// free one when 0), with env added to its environment.
func startRateLimit(ctx context.Context, dir, configAddr, nodeID string, grpcPort int, env ...string) (*RateLimitService, error) {
	redis, bin := os.Getenv("GLOBALCONFIG_REDIS"), os.Getenv("GLOBALCONFIG_RATELIMIT")
	if redis == "" || bin == "" {
		return nil, toolcache.Unset("the rate-limit service and Redis", "GLOBALCONFIG_REDIS", "GLOBALCONFIG_RATELIMIT")
	}
	r := &RateLimitService{dir: dir, bin: bin}
	sock := filepath.Join(dir, "redis.sock")
	var err error
	if r.Redis, err = Start(dir, "redis", redis, []string{"--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no"}, nil); err != nil {
		return nil, err
	}
	if !Eventually(ctx, 10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }) {
		r.Close()
		return nil, fmt.Errorf("redis: no socket %s:\n%s", sock, r.Redis.Log(2000))
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			r.Close()
			return nil, err
		}
	}
	r.HTTPPort, r.GRPCPort = ports[0], ports[1]
	if grpcPort != 0 {
		r.GRPCPort = grpcPort
	}
	r.env = append([]string{
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=unix", "REDIS_URL=" + sock,
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(r.HTTPPort),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(r.GRPCPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + configAddr,
		"CONFIG_GRPC_XDS_NODE_ID=" + nodeID,
		// A reconnect after a configuration server restart comes in a
		// second, not the service's default 10 s.
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=1s",
	}, env...)
	if err := r.StartService(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// StartService starts the rate-limit service (again, after StopService)
// and waits until it answers.
func (r *RateLimitService) StartService(ctx context.Context) error {
	var err error
	if r.Service, err = Start(r.dir, "ratelimit", r.bin, nil, r.env); err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/healthcheck", r.HTTPPort)
	if !Eventually(ctx, 30*time.Second, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		return fmt.Errorf("the rate-limit service does not answer %s:\n%s", url, r.Service.Log(3000))
	}
	return nil
}

// StopService stops the rate-limit service (Redis and the configuration
// server go on): what a request meets when the service is down.
func (r *RateLimitService) StopService() {
	if r.Service != nil {
		r.Service.Kill()
		r.Service = nil
	}
}

// Publish serves the service the limits set carries, and returns their
// version.
func (r *RateLimitService) Publish(set []*envoyfilter.Object) (string, error) {
	return r.Config.Publish(set)
}

// Close stops everything.
func (r *RateLimitService) Close() {
	if r == nil {
		return
	}
	r.StopService()
	if r.grpc != nil {
		r.grpc.Stop()
	}
	if r.Redis != nil {
		r.Redis.Kill()
	}
}
