package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the controller's Prometheus metrics.
type Metrics struct {
	Reconciles        *prometheus.CounterVec
	ReconcileErrors   prometheus.Counter
	ReconcileDuration prometheus.Histogram
	ConfigValid       prometheus.Gauge
	LastApply         prometheus.Gauge
	ManagedFilters    prometheus.Gauge
	APIWrites         *prometheus.CounterVec
	Leader            prometheus.Gauge
	RolloutProxies    *prometheus.GaugeVec
	Rollouts          *prometheus.CounterVec
	DirectRollouts    *prometheus.CounterVec
	IstiodUnreachable prometheus.Gauge
	// RolloutRequests and RolloutBytes are what the tracker asked istiod
	// and read back, by endpoint (/debug/syncz, ...): its cost per poll.
	RolloutRequests *prometheus.CounterVec
	RolloutBytes    *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "globalconfig_reconcile_total",
			Help: "Reconciles by result: applied (something was written), unchanged, invalid (document rejected, last good kept), error.",
		}, []string{"result"}),
		ReconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "globalconfig_reconcile_errors_total",
			Help: "Reconciles that failed with an API error.",
		}),
		ReconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "globalconfig_reconcile_duration_seconds",
			Help:    "Time of one reconcile, from reading the ConfigMap to the last write.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		ConfigValid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "globalconfig_config_valid",
			Help: "1 when the current global document is valid, 0 when it was rejected.",
		}),
		LastApply: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "globalconfig_last_successful_apply_timestamp_seconds",
			Help: "Unix time of the last reconcile that left the cluster equal to the document.",
		}),
		ManagedFilters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "globalconfig_managed_envoyfilters",
			Help: "EnvoyFilters the controller keeps.",
		}),
		APIWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "globalconfig_api_writes_total",
			Help: "Writes to the API server by verb and resource (leader election excluded).",
		}, []string{"verb", "resource"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "globalconfig_leader",
			Help: "1 while this replica is the elected writer.",
		}),
		RolloutProxies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "globalconfig_rollout_proxies",
			Help: "Proxies the current EnvoyFilter set reaches, by rollout state: Synced, Pending, Stale, NACKed.",
		}, []string{"state"}),
		Rollouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "globalconfig_canary_rollouts_total",
			Help: "Canary rollouts by phase reached: Canary (started), Promoted, RolledBack.",
		}, []string{"phase"}),
		DirectRollouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "globalconfig_direct_rollouts_total",
			Help: "Direct changes judged by the proxies' answers, by the phase reached: Promoted (taken, now the last good document), RolledBack (refused: the last good set restored), Kept (the restored set was refused too: the document kept).",
		}, []string{"phase"}),
		IstiodUnreachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "globalconfig_rollout_istiod_unreachable",
			Help: "istiod instances whose sync status could not be read at the last poll.",
		}),
	}
	m.RolloutRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "globalconfig_rollout_requests_total",
		Help: "Requests the rollout tracker made to istiod's debug endpoints, by endpoint.",
	}, []string{"endpoint"})
	m.RolloutBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "globalconfig_rollout_response_bytes_total",
		Help: "Bytes the rollout tracker read from istiod's debug endpoints, by endpoint.",
	}, []string{"endpoint"})
	reg.MustRegister(m.Reconciles, m.ReconcileErrors, m.ReconcileDuration, m.ConfigValid,
		m.LastApply, m.ManagedFilters, m.APIWrites, m.Leader, m.RolloutProxies, m.Rollouts, m.DirectRollouts, m.IstiodUnreachable,
		m.RolloutRequests, m.RolloutBytes)
	return m
}

// RolloutRead counts one answer the tracker read (rollout.Client.Read).
func (m *Metrics) RolloutRead(endpoint string, bytes int) {
	m.RolloutRequests.WithLabelValues(endpoint).Inc()
	m.RolloutBytes.WithLabelValues(endpoint).Add(float64(bytes))
}
