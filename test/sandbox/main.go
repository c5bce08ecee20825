// Command sandbox is `make run`: a local etcd and kube-apiserver with
// Istio's CRDs, the example global ConfigMap, istiod with an ingress
// Gateway, the controller running against them as its ServiceAccount, and
// a real Envoy as the ingress gateway on a loopback port, in front of a
// backend that echoes requests. Profiles (--with, the Makefile's WITH)
// add the real services items send to: ratelimit (envoyproxy/ratelimit
// with Redis, configured by the controller's own --ratelimit-config-addr,
// and a second gateway sharing its limits), auth (oauth2-proxy with a
// basic-auth user). Ctrl-C stops it all and removes what it created.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.controller, "controller", "bin/globalconfig", "the globalconfig binary to run")
	with := flag.String("with", "", "profiles to add, comma-separated: ratelimit, and auth or extauthz")
	started := flag.String("started", "", "when the command started (Unix seconds, as `date +%s.%N` prints): Ready counts from it, so it includes the build")
	flag.Parse()
	var err error
	if o.profiles, err = parseProfiles(*with); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(2)
	}
	if o.commandStarted, err = parseStarted(*started); err != nil {
		// Only the figure suffers (a date without %N, as macOS's):
		// Ready then counts from the sandbox's own start.
		fmt.Fprintln(os.Stderr, "sandbox:", err, "(Ready counts from the sandbox's start)")
	}
	o.out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, nil); err != nil {
		if ctx.Err() != nil {
			// Ctrl-C while starting: everything is stopped and removed.
			fmt.Fprintln(os.Stderr, "sandbox: stopped while starting")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		stop()
		os.Exit(1)
	}
}

// options are what `make run` asks for.
type options struct {
	controller string
	profiles   profiles
	// commandStarted is when `make run` started (zero: unknown), before
	// it built anything.
	commandStarted time.Time
	out            io.Writer
}

// profiles are the optional services the sandbox starts.
type profiles struct {
	rateLimit, auth, extAuthz bool
}

func (p profiles) String() string {
	var names []string
	if p.rateLimit {
		names = append(names, "ratelimit")
	}
	if p.auth {
		names = append(names, "auth")
	}
	if p.extAuthz {
		names = append(names, "extauthz")
	}
	return strings.Join(names, ",")
}

// parseProfiles reads --with: ratelimit, auth or extauthz, comma-separated
// (auth and extauthz are two services for the one extAuth section).
func parseProfiles(s string) (profiles, error) {
	var p profiles
	for _, name := range strings.Split(s, ",") {
		switch strings.TrimSpace(name) {
		case "":
		case "ratelimit":
			p.rateLimit = true
		case "auth":
			p.auth = true
		case "extauthz":
			p.extAuthz = true
		default:
			return p, fmt.Errorf("WITH=%s: unknown profile %q; the profiles are ratelimit, auth (oauth2-proxy) and extauthz (Istio's ext_authz sample), e.g. WITH=ratelimit,auth", s, name)
		}
	}
	if p.auth && p.extAuthz {
		return p, fmt.Errorf("WITH=%s: auth and extauthz both fill the document's one extAuth section: choose one", s)
	}
	return p, nil
}

// parseStarted reads --started, Unix seconds with a fraction.
func parseStarted(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 {
		return time.Time{}, fmt.Errorf("--started=%s: want Unix seconds, as `date +%%s.%%N` prints", s)
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)), nil
}

// run starts the sandbox, calls ready (when not nil) once it serves what
// the banner says, and stops everything and removes its folder when ctx
// ends (Ctrl-C) or a component exits.
func run(ctx context.Context, o options, ready func(*playground)) (err error) {
	started := time.Now()
	dir, err := os.MkdirTemp("", "globalconfig-sandbox-")
	if err != nil {
		return err
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove the sandbox's folder %s: %w", dir, rmErr))
		} else {
			fmt.Fprintln(o.out, "removed", dir)
		}
	}()
	p, stop, err := start(ctx, o, dir)
	defer stop()
	if err != nil {
		return err
	}
	p.printBanner(o.out)
	if o.commandStarted.IsZero() {
		fmt.Fprintf(o.out, "Ready in %.1fs.\n", time.Since(started).Seconds())
	} else {
		fmt.Fprintf(o.out, "Ready in %.1fs since `make run` started (building %.1fs, starting %.1fs).\n",
			time.Since(o.commandStarted).Seconds(), started.Sub(o.commandStarted).Seconds(), time.Since(started).Seconds())
	}
	if ready != nil {
		ready(p)
	}
	return p.wait(ctx, o.out)
}
