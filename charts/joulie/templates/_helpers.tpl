{{/*
Names, labels and the pieces of the agent pod that both modes share.
*/}}

{{- define "joulie.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name prefix. Truncated to 52 characters so that "<fullname>-agent-pool"
plus the StatefulSet's controller-revision-hash label stays within 63.
*/}}
{{- define "joulie.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "joulie.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the agent workload: <fullname>-agent (DaemonSet) or <fullname>-agent-pool. */}}
{{- define "joulie.agentName" -}}
{{- if eq .Values.agent.mode "pool" }}
{{- printf "%s-agent-pool" (include "joulie.fullname" .) }}
{{- else }}
{{- printf "%s-agent" (include "joulie.fullname" .) }}
{{- end }}
{{- end }}

{{/*
Joulie's name for its agent: the app.kubernetes.io/name of Joulie's agent pods, by which
Joulie's docs (kubectl logs -l app.kubernetes.io/name=joulie-agent) and its agent Service
select them, and of its metrics Service, by which its ServiceMonitors select that. The
agent pods and the metrics Service carry it; every other object the chart's name.
*/}}
{{- define "joulie.agentAppName" -}}
joulie-agent
{{- end }}

{{/*
Selector labels of the agent pods, fixed for the lifetime of a workload: a DaemonSet's or
StatefulSet's selector cannot change (joulie.checkSelector). Independent of nameOverride.
*/}}
{{- define "joulie.selectorLabels" -}}
app.kubernetes.io/name: {{ include "joulie.agentAppName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/* Kubernetes recommended labels, on every object (the agent pods: joulie.podMetadata). */}}
{{- define "joulie.labels" -}}
helm.sh/chart: {{ include "joulie.chart" . }}
app.kubernetes.io/name: {{ include "joulie.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
app.kubernetes.io/version: {{ include "joulie.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: joulie
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* "k=v,k=v" of a map of labels, keys sorted: a selector as kubectl -l takes it. */}}
{{- define "joulie.selectorString" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/*
On an upgrade, refuse before anything is applied when this release's agent workload in the
cluster selects its pods otherwise than the chart does (a release of a chart before 0.2.0
selects app.kubernetes.io/name: joulie, the chart's name). The API server would refuse the
new selector as immutable, with the upgrade half applied; the way out is to replace the
workload, which the message spells out. lookup answers only against a cluster (helm
install, upgrade, --dry-run=server); helm template renders without this check.
*/}}
{{- define "joulie.checkSelector" -}}
{{- if .Release.IsUpgrade }}
{{- $kind := ternary "StatefulSet" "DaemonSet" (eq .Values.agent.mode "pool") }}
{{- $name := include "joulie.agentName" . }}
{{- $live := lookup "apps/v1" $kind .Release.Namespace $name }}
{{- $owner := dig "metadata" "annotations" "meta.helm.sh/release-name" "" ($live | default dict) }}
{{- if and $live (eq $owner .Release.Name) }}
{{- $want := include "joulie.selectorLabels" . | fromYaml }}
{{- $have := dig "spec" "selector" dict $live }}
{{- if ne (toJson $have) (toJson (dict "matchLabels" $want)) }}
{{- fail (printf "the %s %s/%s selects its pods by %s; from chart 0.2.0 on they carry Joulie's agent label and are selected by %s, and a %s's selector cannot change. Replace it once, then upgrade again: kubectl -n %s delete %s %s --cascade=foreground (it returns once the old pods have stopped, each having put back what it changed; the nodes are not controlled until the new pods start). See \"Upgrading\" in the chart's README." $kind .Release.Namespace $name (include "joulie.selectorString" (dig "matchLabels" dict $have)) (include "joulie.selectorString" $want) $kind .Release.Namespace (lower $kind) $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "joulie.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "joulie.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
A value as the string the agent reads: a whole number as digits, however it came (a values
file's 1500000 is a float, which toString writes as 1.5e+06; --set gives an integer).
*/}}
{{- define "joulie.scalar" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) }}{{ int64 . }}{{ else }}{{ toString . }}{{ end }}
{{- end }}

{{/* The agent image: agent.image.* (the key of Joulie's chart) wins over image.*, field by field. */}}
{{- define "joulie.imageTag" -}}
{{- include "joulie.scalar" (dig "image" "tag" "" .Values.agent | default .Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "joulie.image" -}}
{{- printf "%s:%s" (dig "image" "repository" "" .Values.agent | default .Values.image.repository) (include "joulie.imageTag" .) }}
{{- end }}

{{- define "joulie.imagePullPolicy" -}}
{{- dig "image" "pullPolicy" "" .Values.agent | default .Values.image.pullPolicy }}
{{- end }}

{{/* The port the agent listens on: the port of METRICS_ADDR (default :8080). */}}
{{- define "joulie.metricsPort" -}}
{{- $addr := index .Values.agent.env "METRICS_ADDR" | default ":8080" | toString }}
{{- regexFind "[0-9]+$" $addr | default "8080" }}
{{- end }}

{{/*
POOL_SHARDS: the replica count unless set. Any other value would break the
pool: ordinals >= shards refuse to start, shards without a pod leave their
nodes unmanaged.
*/}}
{{- define "joulie.poolShards" -}}
{{- $replicas := int .Values.agent.pool.replicas }}
{{- $shards := int (.Values.agent.pool.shards | default $replicas) }}
{{- if ne $shards $replicas }}
{{- fail (printf "agent.pool.shards (%d) must equal agent.pool.replicas (%d), or be null/0 to follow it: each replica serves the shard of its ordinal" $shards $replicas) }}
{{- end }}
{{- $shards }}
{{- end }}

{{/* Where the agent keeps prometheus_client's multiprocess files (an emptyDir). */}}
{{- define "joulie.multiprocDir" -}}
/var/run/agentpool/metrics
{{- end }}

{{/* Where workers journal the host values found before their first write (an emptyDir
of its own: it outlives container restarts, so a restarted agent restores the originals). */}}
{{- define "joulie.stateDir" -}}
/var/lib/agentpool/state
{{- end }}

{{/* Pod metadata shared by both workloads: the selector's labels win over agent.podLabels,
which win over the chart's other labels. */}}
{{- define "joulie.podMetadata" -}}
labels:
  {{- $labels := include "joulie.selectorLabels" . | fromYaml }}
  {{- $labels = merge $labels (.Values.agent.podLabels | default dict) (include "joulie.labels" . | fromYaml) }}
  {{- toYaml $labels | nindent 2 }}
{{- with .Values.agent.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Environment common to both modes: agent.env, then what the chart owns. */}}
{{- define "joulie.commonEnv" -}}
{{- range $name, $value := .Values.agent.env }}
- name: {{ $name }}
  value: {{ include "joulie.scalar" $value | quote }}
{{- end }}
{{- if .Values.hardwareCatalog.enabled }}
- name: HARDWARE_CATALOG_PATH
  value: {{ include "joulie.hardwareCatalogPath" . | quote }}
{{- end }}
- name: LOG_FORMAT
  value: {{ .Values.agent.logFormat | quote }}
- name: EVENTS
  value: {{ ternary "true" "false" (.Values.agent.events | default false) | quote }}
- name: JOULIE_API
  value: {{ (.Values.joulie).api | default "auto" | quote }}
{{- with .Values.agent.httpAuth }}
{{- if .caSecret }}
- name: HTTP_CA_BUNDLE
  value: {{ printf "/etc/agentpool/http/ca/%s" .caKey | quote }}
{{- end }}
{{- if .tokenSecret }}
- name: HTTP_TOKEN_FILE
  value: {{ printf "/etc/agentpool/http/token/%s" .tokenKey | quote }}
{{- end }}
{{- if .clientCertSecret }}
- name: HTTP_CLIENT_CERT
  value: /etc/agentpool/http/client/tls.crt
- name: HTTP_CLIENT_KEY
  value: /etc/agentpool/http/client/tls.key
{{- end }}
{{- end }}
- name: SHUTDOWN_TIMEOUT
  value: {{ printf "%ds" (int .Values.agent.shutdownTimeoutSeconds) | quote }}
- name: PROMETHEUS_MULTIPROC_DIR
  value: {{ include "joulie.multiprocDir" . | quote }}
- name: STATE_DIR
  value: {{ include "joulie.stateDir" . | quote }}
{{- end }}

{{/* Longer than the supervisor's own deadline, so it is never SIGKILLed mid-restore. */}}
{{- define "joulie.terminationGracePeriodSeconds" -}}
{{- add (int .Values.agent.shutdownTimeoutSeconds) 10 }}
{{- end }}

{{/* Image, args, port and probes of the agent container. */}}
{{- define "joulie.containerCommon" -}}
image: {{ include "joulie.image" . | quote }}
imagePullPolicy: {{ include "joulie.imagePullPolicy" . }}
{{- with .Values.agent.args }}
args:
  {{- toYaml . | nindent 2 }}
{{- end }}
ports:
  - name: metrics
    containerPort: {{ include "joulie.metricsPort" . }}
    protocol: TCP
{{- with .Values.agent.startupProbe }}
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
  {{- toYaml . | nindent 2 }}
{{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  {{- toYaml .Values.agent.livenessProbe | nindent 2 }}
readinessProbe:
  httpGet:
    # Held by the agent while not ready, answered within the probe's timeout.
    path: {{ printf "/readyz?wait=%ds" (max 0 (sub (int .Values.agent.readinessProbe.timeoutSeconds) 1)) }}
    port: metrics
  {{- toYaml .Values.agent.readinessProbe | nindent 2 }}
{{- with .Values.agent.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Volumes both modes mount: the metrics and state directories and a writable /tmp. */}}
{{- define "joulie.commonVolumeMounts" -}}
- name: metrics-multiproc
  mountPath: {{ include "joulie.multiprocDir" . }}
- name: agent-state
  mountPath: {{ include "joulie.stateDir" . }}
- name: tmp
  mountPath: /tmp
{{- if .Values.hardwareCatalog.enabled }}
- name: hardware-catalog
  mountPath: {{ .Values.hardwareCatalog.mountPath }}
  readOnly: true
{{- end }}
{{- with .Values.agent.httpAuth }}
{{- if .caSecret }}
- name: http-ca
  mountPath: /etc/agentpool/http/ca
  readOnly: true
{{- end }}
{{- if .tokenSecret }}
- name: http-token
  mountPath: /etc/agentpool/http/token
  readOnly: true
{{- end }}
{{- if .clientCertSecret }}
- name: http-client
  mountPath: /etc/agentpool/http/client
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/* Secrets are mounted as directories (not subPath), so a rotation reaches the
pod and the agent re-reads the token. */}}
{{- define "joulie.commonVolumes" -}}
- name: metrics-multiproc
  # In memory: every worker's ticks write its mmap'd files, which a disk-backed
  # emptyDir would write back to the node's disk for nothing, and 1,000 workers
  # creating their files at start-up queue on the filesystem's inode allocator.
  # A few pages per node (12 MiB at 1,000), counted in the pod's memory.
  emptyDir:
    medium: Memory
- name: agent-state
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if .Values.hardwareCatalog.enabled }}
- name: hardware-catalog
  configMap:
    name: {{ .Values.hardwareCatalog.configMapName }}
{{- end }}
{{- with .Values.agent.httpAuth }}
{{- if .caSecret }}
- name: http-ca
  secret:
    secretName: {{ .caSecret }}
{{- end }}
{{- if .tokenSecret }}
- name: http-token
  secret:
    secretName: {{ .tokenSecret }}
{{- end }}
{{- if .clientCertSecret }}
- name: http-client
  secret:
    secretName: {{ .clientCertSecret }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where the catalog file is: Joulie's chart passes the same path. */}}
{{- define "joulie.hardwareCatalogPath" -}}
{{- printf "%s/%s" (.Values.hardwareCatalog.mountPath | trimSuffix "/") .Values.hardwareCatalog.key }}
{{- end }}

{{/*
The pod's nodeSelector: agent.nodeSelector, with the mode's own key of Joulie's chart
(agent.daemonset.nodeSelector, agent.pool.podNodeSelector) merged over it.
*/}}
{{- define "joulie.podNodeSelector" -}}
{{- $selector := dict }}
{{- $_ := mergeOverwrite $selector (.Values.agent.nodeSelector | default dict) }}
{{- if eq .Values.agent.mode "pool" }}
{{- $_ = mergeOverwrite $selector (.Values.agent.pool.podNodeSelector | default dict) }}
{{- else }}
{{- $_ = mergeOverwrite $selector (dig "nodeSelector" dict (.Values.agent.daemonset | default dict)) }}
{{- end }}
{{- toYaml $selector }}
{{- end }}

{{/* Scheduling and identity of the pod, shared by both modes. */}}
{{- define "joulie.podScheduling" -}}
serviceAccountName: {{ include "joulie.serviceAccountName" . }}
automountServiceAccountToken: true
enableServiceLinks: false
terminationGracePeriodSeconds: {{ include "joulie.terminationGracePeriodSeconds" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.agent.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with include "joulie.podNodeSelector" . | fromYaml }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.agent.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.agent.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
