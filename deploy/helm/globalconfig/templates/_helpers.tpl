{{/*
Object names are fixed, as in deploy/: the controller's defaults use them
(the Lease and the webhook configuration "globalconfig", the Secret
"globalconfig-webhook-tls"), and there is one global ConfigMap per cluster.
*/}}

{{/* Labels of every object the chart renders. */}}
{{- define "globalconfig.labels" -}}
app.kubernetes.io/name: globalconfig
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The controller's pods; the same selector as deploy/base. */}}
{{- define "globalconfig.selectorLabels" -}}
app.kubernetes.io/name: globalconfig
{{- end }}

{{/* "true" in standalone mode, else empty. */}}
{{- define "globalconfig.standalone" -}}
{{- if eq .Values.mode "standalone" }}true{{ end }}
{{- end }}

{{/* "true" when the admission webhook is served: standalone only. */}}
{{- define "globalconfig.webhook" -}}
{{- if and (eq .Values.mode "standalone") .Values.webhook.enabled }}true{{ end }}
{{- end }}

{{/* "true" when the webhook checks edits with the fleet's Envoy. */}}
{{- define "globalconfig.envoyAdmission" -}}
{{- if and (include "globalconfig.webhook" .) .Values.envoyAdmission.enabled }}true{{ end }}
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "globalconfig.serviceAccount" -}}
{{- if eq .Values.mode "standalone" }}globalconfig{{ else }}{{ .Values.istiodServiceAccount }}{{ end }}
{{- end }}

{{/* The global ConfigMap as `globalconfig run --configmap` takes it. */}}
{{- define "globalconfig.configMapRef" -}}
{{ .Release.Namespace }}/{{ .Values.configMapName }}
{{- end }}

{{/* The image reference. */}}
{{- define "globalconfig.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Refuses values that would render something that can't work. */}}
{{- define "globalconfig.validate" -}}
{{- if not (has .Values.mode (list "standalone" "istiodSidecar")) }}
{{- fail (printf "mode must be standalone or istiodSidecar, not %q" (toString .Values.mode)) }}
{{- end }}
{{- if not .Values.configMapName }}
{{- fail "configMapName must not be empty" }}
{{- end }}
{{- if and (include "globalconfig.webhook" .) (not (has .Values.webhook.certificate (list "self" "certManager"))) }}
{{- fail (printf "webhook.certificate must be self or certManager, not %q" (toString .Values.webhook.certificate)) }}
{{- end }}
{{- if and (eq .Values.mode "standalone") (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount above 1 needs leaderElection.enabled: replicas without a Lease would all write" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (ne .Values.mode "standalone") }}
{{- fail "metrics.serviceMonitor.enabled is for standalone mode; in istiodSidecar mode scrape port 9090 of istiod's pods" }}
{{- end }}
{{- if and .Values.envoyAdmission.enabled (not (include "globalconfig.webhook" .)) }}
{{- fail "envoyAdmission.enabled checks the webhook's edits: it needs mode standalone and webhook.enabled" }}
{{- end }}
{{- if and (include "globalconfig.envoyAdmission" .) (not .Values.envoyAdmission.image.tag) }}
{{- fail "envoyAdmission.image.tag must be your fleet's Istio version (istio/proxyv2's tag, e.g. 1.31.0): the check must run the Envoy your proxies run" }}
{{- end }}
{{- if and .Values.multicluster.enabled (ne .Values.mode "standalone") }}
{{- fail "multicluster.enabled needs mode standalone (--member-secrets needs the kube sink); over MCP each member's istiod is served by a replica beside it: see docs/operations.md#multi-cluster" }}
{{- end }}
{{- if and .Values.multicluster.enabled (or (gt (len (toString .Values.multicluster.clusterName)) 63) (not (regexMatch "^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$" (toString .Values.multicluster.clusterName)))) }}
{{- fail (printf "multicluster.clusterName %q is not a cluster name: letters, digits, '.', '_' and '-' (not first or last), at most 63 bytes; the home istiod's CLUSTER_ID" (toString .Values.multicluster.clusterName)) }}
{{- end }}
{{- if and .Values.rollout.enabled (eq .Values.mode "standalone") (not .Values.rollout.istiodService) }}
{{- fail "rollout.istiodService must name istiod's Service when rollout.enabled" }}
{{- end }}
{{- end }}
