package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/globalconfig/globalconfig/test/toolcache"
)

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
	r.env = []string{
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=unix", "REDIS_URL=" + sock,
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(r.HTTPPort),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(r.GRPCPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + configAddr,
		"CONFIG_GRPC_XDS_NODE_ID=globalconfig-sandbox",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=1s",
	}
	if err := r.StartService(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}
