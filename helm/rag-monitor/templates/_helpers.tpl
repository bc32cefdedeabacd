{{/*
Helpers of the rag-monitor chart. Templates taking a dict get the chart's root context as `root`
and a component: ingest, judge, drift (mode standalone), combined (mode combined) or sidecar.
*/}}

{{- define "rag-monitor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object name prefix; 50 characters leave room for the suffixes (-ingest, -replay…). */}}
{{- define "rag-monitor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := include "rag-monitor.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rag-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rag-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rag-monitor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "rag-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ include "rag-monitor.imageTag" . | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rag-monitor
{{- end }}

{{- define "rag-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rag-monitor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rag-monitor.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "rag-monitor.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "rag-monitor.imageTag" .) }}
{{- end }}
{{- end }}

{{/* True when the cluster serves prometheus-operator's API (helm template: --api-versions). */}}
{{- define "rag-monitor.hasMonitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* The components `mode` runs, as a JSON list. */}}
{{- define "rag-monitor.components" -}}
{{- if eq .Values.mode "standalone" }}["ingest","judge","drift"]
{{- else if eq .Values.mode "combined" }}["combined"]
{{- else }}["sidecar"]
{{- end }}
{{- end }}

{{/* The sidecar's pipeline.role for a component. */}}
{{- define "rag-monitor.pipelineRole" -}}
{{- get (dict "ingest" "ingest" "judge" "judge" "drift" "drift" "combined" "all" "sidecar" "all") . }}
{{- end }}

{{- define "rag-monitor.componentName" -}}
{{- $full := include "rag-monitor.fullname" .root }}
{{- if eq .component "combined" }}{{ $full }}{{ else }}{{ printf "%s-%s" $full .component }}{{ end }}
{{- end }}

{{- define "rag-monitor.secretName" -}}
{{- default (printf "%s-secrets" (include "rag-monitor.fullname" .)) .Values.secrets.existingSecret }}
{{- end }}

{{- define "rag-monitor.goldenConfigMapName" -}}
{{- default (printf "%s-golden" (include "rag-monitor.fullname" .)) .Values.golden.existingConfigMap }}
{{- end }}

{{- define "rag-monitor.hasGolden" -}}
{{- if or .Values.golden.data .Values.golden.existingConfigMap }}true{{ end }}
{{- end }}

{{/* Sets `value` at `path` (a list of keys) in the map `map`, creating maps on the way. */}}
{{- define "rag-monitor.setIn" -}}
{{- $m := .map }}
{{- range $key := initial .path }}
{{- if not (kindIs "map" (get $m $key)) }}{{ $_ := set $m $key dict }}{{ end }}
{{- $m = get $m $key }}
{{- end }}
{{- $_ := set $m (last .path) .value }}
{{- end }}

{{/*
The credentials a process needs from the Secret, as YAML: {name: {key, setting}}. `setting` is
the config key that gets the mounted file's path. `judge` (bool) says whether the process judges
(pipeline.role judge/all, or the replay Job with an LLM judge); `options` are its judge options.
A credential the configuration needs but nobody gives is an install-time error. `replay` (a config
path, or empty) is where a process that replays the golden set against the RAG service reads the
shared replay secret signing its X-RAG-Replay mark; that one is optional (the product replays
unmarked with a warning, and NOTES.txt warns: see rag-monitor.unsignedReplays). Phoenix's API key
goes to a judging component (`kafka` and `judge`) when config.events.phoenix.url is set and a key
is given; optional too (Phoenix without authentication needs none).
*/}}
{{- define "rag-monitor.credentials" -}}
{{- $v := .root.Values -}}
{{- $s := $v.secrets }}
{{- $config := default dict $v.config }}
{{- $kafka := default dict $config.kafka }}
{{- $existing := ne $s.existingSecret "" }}
{{- $out := dict }}
{{- if hasKey .options "api_key" }}
{{- fail "judge.options.api_key / replay.config.judge_options.api_key would put the API key in a ConfigMap: set secrets.judgeApiKey or secrets.existingSecret" }}
{{- end }}
{{- if and .judge (has .backend (list "anthropic" "openai")) (not (hasKey .options "api_key_file")) }}
{{- $envName := printf "%s_API_KEY" (upper .backend) }}
{{- $fromEnv := false }}
{{- range $v.extraEnv }}{{ if eq .name $envName }}{{ $fromEnv = true }}{{ end }}{{ end }}
{{- if $fromEnv }}
{{- else if and $s.keys.judgeApiKey (or $existing $s.judgeApiKey) }}
{{- $_ := set $out "judgeApiKey" (dict "key" $s.keys.judgeApiKey "setting" .judgeKeySetting) }}
{{- else }}
{{- fail (printf "the %s judge needs an API key: set secrets.judgeApiKey (--set-file), or secrets.existingSecret with key secrets.keys.judgeApiKey" .backend) }}
{{- end }}
{{- end }}
{{- if .kafka }}
{{- $protocol := default "PLAINTEXT" $kafka.security_protocol }}
{{- if and (hasPrefix "SASL_" $protocol) (not (hasKey $kafka "sasl_password_file")) }}
{{- if and $s.keys.kafkaSaslPassword (or $existing $s.kafkaSaslPassword) }}
{{- $_ := set $out "kafkaSaslPassword" (dict "key" $s.keys.kafkaSaslPassword "setting" (list "kafka" "sasl_password_file")) }}
{{- else }}
{{- fail (printf "config.kafka.security_protocol %s needs the SASL password: set secrets.kafkaSaslPassword, or secrets.existingSecret with key secrets.keys.kafkaSaslPassword" $protocol) }}
{{- end }}
{{- end }}
{{- if and $kafka.ssl_keyfile (not (hasKey $kafka "ssl_keyfile_password_file")) $s.keys.kafkaSslKeyPassword (or $existing $s.kafkaSslKeyPassword) }}
{{- $_ := set $out "kafkaSslKeyPassword" (dict "key" $s.keys.kafkaSslKeyPassword "setting" (list "kafka" "ssl_keyfile_password_file")) }}
{{- end }}
{{- end }}
{{- if and .replay (not (include "rag-monitor.replaySecretElsewhere" (dict "root" .root "setting" .replay))) $s.keys.replaySecret (or $existing $s.replaySecret) }}
{{- $_ := set $out "replaySecret" (dict "key" $s.keys.replaySecret "setting" .replay) }}
{{- end }}
{{- $phoenix := dig "events" "phoenix" dict $config }}
{{- if and .kafka .judge $phoenix.url (not (hasKey $phoenix "token_file")) $s.keys.phoenixToken (or $existing $s.phoenixToken) }}
{{- $_ := set $out "phoenixToken" (dict "key" $s.keys.phoenixToken "setting" (list "events" "phoenix" "token_file")) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
True when a replaying process gets the replay secret other than from the chart's Secret: its
config already names a file (`setting`, in config or replay.config), or extraEnv sets one of the
variables the product reads.
*/}}
{{- define "rag-monitor.replaySecretElsewhere" -}}
{{- $v := .root.Values }}
{{- $config := default dict (ternary $v.replay.config $v.config (eq (first .setting) "target")) }}
{{- $section := default dict (get $config (first .setting)) }}
{{- if hasKey $section (last .setting) }}true{{ end }}
{{- range $v.extraEnv }}
{{- if has .name (list "RAGMON_REPLAY_SECRET" "RAGMON_REPLAY_SECRET_FILE" "RAGMON_GOLDEN__REPLAY_SECRET" "RAGMON_GOLDEN__REPLAY_SECRET_FILE") }}true{{ end }}
{{- end }}
{{- end }}

{{/* Whether a component's process runs the scheduled golden replay (config.golden.target set). */}}
{{- define "rag-monitor.replaysGolden" -}}
{{- $golden := dig "golden" dict (default dict .root.Values.config) }}
{{- if and (has .component (list "judge" "combined" "sidecar")) $golden.target }}true{{ end }}
{{- end }}

{{/*
The replays of this release that send the RAG service unsigned requests (no replay secret wired,
none elsewhere), one per line, for NOTES.txt's warning: such requests count as production traffic.
*/}}
{{- define "rag-monitor.unsignedReplays" -}}
{{- if .Values.replay.enabled }}
{{- if not (hasKey (include "rag-monitor.replayCredentials" . | fromYaml) "replaySecret") }}
{{- if not (include "rag-monitor.replaySecretElsewhere" (dict "root" . "setting" (list "target" "replay_secret_file"))) }}
- the replay CronJob (replay.enabled)
{{- end }}
{{- end }}
{{- end }}
{{- range $component := include "rag-monitor.components" . | fromJsonArray }}
{{- if include "rag-monitor.replaysGolden" (dict "root" $ "component" $component) }}
{{- if not (hasKey (include "rag-monitor.componentCredentials" (dict "root" $ "component" $component) | fromYaml) "replaySecret") }}
{{- if not (include "rag-monitor.replaySecretElsewhere" (dict "root" $ "setting" (list "golden" "replay_secret_file"))) }}
- the {{ $component }} pods' scheduled golden replay (config.golden.target)
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The credentials of a component's process (see rag-monitor.credentials). */}}
{{- define "rag-monitor.componentCredentials" -}}
{{- $config := default dict .root.Values.config }}
{{- $judge := default dict $config.judge }}
{{- $role := include "rag-monitor.pipelineRole" .component }}
{{- $replay := ternary (list "golden" "replay_secret_file") list (eq (include "rag-monitor.replaysGolden" .) "true") }}
{{- include "rag-monitor.credentials" (dict "root" .root "kafka" true "judge" (has $role (list "judge" "all")) "backend" (default "lexical" $judge.backend) "options" (default dict $judge.options) "judgeKeySetting" (list "judge" "options" "api_key_file") "replay" $replay) }}
{{- end }}

{{- define "rag-monitor.replayCredentials" -}}
{{- $config := default dict .Values.replay.config }}
{{- include "rag-monitor.credentials" (dict "root" . "kafka" false "judge" true "backend" .Values.replay.judge "options" (default dict $config.judge_options) "judgeKeySetting" (list "judge_options" "api_key_file") "replay" (list "target" "replay_secret_file")) }}
{{- end }}

{{/* Whether the component's pods run the scheduled golden replay from the golden ConfigMap. */}}
{{- define "rag-monitor.scheduledGolden" -}}
{{- $config := default dict .root.Values.config }}
{{- $golden := default dict $config.golden }}
{{- if and (has .component (list "judge" "combined" "sidecar")) $golden.target (include "rag-monitor.hasGolden" .root) (not $golden.file) }}true{{ end }}
{{- end }}

{{/* A component's config file: values.config plus what the chart owns. */}}
{{- define "rag-monitor.configFile" -}}
{{- $v := .root.Values -}}
{{- $config := deepCopy (default dict $v.config) }}
{{- $role := include "rag-monitor.pipelineRole" .component }}
{{- include "rag-monitor.setIn" (dict "map" $config "path" (list "pipeline" "role") "value" $role) }}
{{- if and (has .component (list "judge" "combined")) }}
{{- $replicas := (get $v .component).replicas | int }}
{{- include "rag-monitor.setIn" (dict "map" $config "path" (list "judge" "budget" "replicas") "value" (max 1 $replicas)) }}
{{- end }}
{{- range $name, $c := include "rag-monitor.componentCredentials" . | fromYaml }}
{{- include "rag-monitor.setIn" (dict "map" $config "path" $c.setting "value" (printf "%s/%s" $v.secrets.mountPath $c.key)) }}
{{- end }}
{{- if include "rag-monitor.scheduledGolden" . }}
{{- include "rag-monitor.setIn" (dict "map" $config "path" (list "golden" "file") "value" (printf "%s/%s" $v.golden.mountPath $v.golden.fileName)) }}
{{- if and (or $v.golden.baseline $v.golden.existingConfigMap) (not $config.golden.baseline) }}
{{- include "rag-monitor.setIn" (dict "map" $config "path" (list "golden" "baseline") "value" (printf "%s/baseline.json" $v.golden.mountPath)) }}
{{- end }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{- define "rag-monitor.replayConfigFile" -}}
{{- $config := deepCopy (default dict .Values.replay.config) }}
{{- range $name, $c := include "rag-monitor.replayCredentials" . | fromYaml }}
{{- include "rag-monitor.setIn" (dict "map" $config "path" $c.setting "value" (printf "%s/%s" $.Values.secrets.mountPath $c.key)) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{- define "rag-monitor.metricsPort" -}}
{{- $config := default dict .Values.config }}
{{- $port := dig "metrics" "port" 9612 $config | int }}
{{- if eq $port 0 }}{{ fail "config.metrics.port 0 (any free port) cannot be probed or scraped: give a port" }}{{ end }}
{{- $port }}
{{- end }}

{{/* Pod annotations that roll the pods when their config, credentials or golden set change. */}}
{{- define "rag-monitor.checksums" -}}
checksum/config: {{ include "rag-monitor.configFile" . | sha256sum }}
{{- if not .root.Values.secrets.existingSecret }}
checksum/secrets: {{ include "rag-monitor.secretData" .root | sha256sum }}
{{- end }}
{{- if include "rag-monitor.scheduledGolden" . }}
checksum/golden: {{ printf "%s%s" .root.Values.golden.data .root.Values.golden.baseline | sha256sum }}
{{- end }}
{{- end }}

{{- define "rag-monitor.secretData" -}}
{{- $s := .Values.secrets }}
{{- if and $s.replaySecret (lt (len (trim $s.replaySecret)) 16) }}
{{- fail "secrets.replaySecret is shorter than 16 bytes: the RAG service would refuse it (e.g. --set-file secrets.replaySecret=<(openssl rand -hex 32))" }}
{{- end }}
{{- range $field := list "judgeApiKey" "kafkaSaslPassword" "kafkaSslKeyPassword" "replaySecret" "phoenixToken" }}
{{- $key := get $s.keys $field }}
{{- $value := get $s $field }}
{{- if and $key $value }}
{{ $key }}: {{ $value | b64enc }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rag-monitor.volumeMounts" -}}
{{- $v := .root.Values -}}
- name: ragmon-config
  mountPath: /etc/rag-monitor/config
  readOnly: true
- name: ragmon-tmp
  mountPath: /tmp
{{- if $v.state.enabled }}
- name: ragmon-state
  mountPath: /var/lib/rag-monitor
{{- end }}
{{- if include "rag-monitor.componentCredentials" . | fromYaml }}
- name: ragmon-secrets
  mountPath: {{ $v.secrets.mountPath }}
  readOnly: true
{{- end }}
{{- if $v.kafkaTls.existingSecret }}
- name: ragmon-kafka-tls
  mountPath: {{ $v.kafkaTls.mountPath }}
  readOnly: true
{{- end }}
{{- if include "rag-monitor.scheduledGolden" . }}
- name: ragmon-golden
  mountPath: {{ $v.golden.mountPath }}
  readOnly: true
{{- end }}
{{- with $v.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "rag-monitor.volumes" -}}
{{- $v := .root.Values -}}
- name: ragmon-config
  configMap:
    name: {{ include "rag-monitor.fullname" .root }}-config
    items:
      - key: {{ .component }}.yaml
        path: config.yaml
- name: ragmon-tmp
  emptyDir:
    sizeLimit: {{ $v.tmp.sizeLimit }}
{{- if $v.state.enabled }}
- name: ragmon-state
  emptyDir:
    sizeLimit: {{ $v.state.sizeLimit }}
{{- end }}
{{- with include "rag-monitor.componentCredentials" . | fromYaml }}
{{ include "rag-monitor.secretVolume" (dict "root" $.root "credentials" . "component" $.component) }}
{{- end }}
{{- if $v.kafkaTls.existingSecret }}
- name: ragmon-kafka-tls
  secret:
    secretName: {{ $v.kafkaTls.existingSecret }}
    defaultMode: {{ include "rag-monitor.secretMode" .component }}
{{- end }}
{{- if include "rag-monitor.scheduledGolden" . }}
- name: ragmon-golden
  configMap:
    name: {{ include "rag-monitor.goldenConfigMapName" .root }}
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Mode of the mounted credential files: 0440 (288) where the chart's pod sets fsGroup; 0444 (292) in
a RAG pod, whose fsGroup is not ours (only the sidecar container mounts the volume).
*/}}
{{- define "rag-monitor.secretMode" -}}
{{- if eq . "sidecar" }}292{{ else }}288{{ end }}
{{- end }}

{{- define "rag-monitor.secretVolume" -}}
- name: ragmon-secrets
  secret:
    secretName: {{ include "rag-monitor.secretName" .root }}
    defaultMode: {{ include "rag-monitor.secretMode" .component }}
    items:
      {{- range $name, $c := .credentials }}
      - key: {{ $c.key }}
        path: {{ $c.key }}
      {{- end }}
{{- end }}

{{/* The rag-monitor container of a component (Deployments and the sidecar). */}}
{{- define "rag-monitor.container" -}}
{{- $v := .root.Values -}}
{{- $resources := (get $v .component).resources }}
{{- $config := default dict $v.config }}
{{- $shutdown := dig "pipeline" "shutdown_seconds" 25 $config | float64 }}
{{- if ge $shutdown (float64 $v.terminationGracePeriodSeconds) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed config.pipeline.shutdown_seconds (%v): Kubernetes would kill the drain" $v.terminationGracePeriodSeconds $shutdown) }}
{{- end }}
name: {{ if eq .component "sidecar" }}{{ $v.sidecar.containerName }}{{ else }}rag-monitor{{ end }}
image: {{ include "rag-monitor.image" .root }}
imagePullPolicy: {{ $v.image.pullPolicy }}
command: ["rag-monitor"]
args:
  - run
  - --config
  - /etc/rag-monitor/config/config.yaml
  - --log-level
  - {{ $v.logLevel }}
ports:
  - name: ragmon-metrics
    containerPort: {{ include "rag-monitor.metricsPort" .root }}
    protocol: TCP
env:
  - name: HOME
    value: /tmp
  {{- with $v.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $v.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: ragmon-metrics
  {{- toYaml $v.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: ragmon-metrics
  {{- toYaml $v.probes.readiness | nindent 2 }}
{{- with $resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $v.securityContext | nindent 2 }}
volumeMounts:
  {{- include "rag-monitor.volumeMounts" . | nindent 2 }}
{{- end }}

{{/*
Sidecar mode, public: the container to add to a RAG pod's `containers`, and the volumes to add to
its `volumes`. Call them with this chart's context: from a parent chart that has rag-monitor as a
dependency, `include "rag-monitor.sidecarContainer" (index .Subcharts "rag-monitor")`.
*/}}
{{- define "rag-monitor.sidecarContainer" -}}
- {{ include "rag-monitor.container" (dict "root" . "component" "sidecar") | indent 2 | trim }}
{{- end }}

{{- define "rag-monitor.sidecarVolumes" -}}
{{ include "rag-monitor.volumes" (dict "root" . "component" "sidecar") }}
{{- end }}

{{/* Sidecar mode, public: pod annotations that roll the RAG pods when the sidecar's config changes. */}}
{{- define "rag-monitor.sidecarPodAnnotations" -}}
{{ include "rag-monitor.checksums" (dict "root" . "component" "sidecar") }}
{{- end }}

{{- define "rag-monitor.podSpec" -}}
{{- $v := .root.Values -}}
serviceAccountName: {{ include "rag-monitor.serviceAccountName" .root }}
automountServiceAccountToken: {{ $v.serviceAccount.automountServiceAccountToken }}
enableServiceLinks: false
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A Deployment of a component (mode standalone: ingest, judge; mode combined: combined). */}}
{{- define "rag-monitor.deployment" -}}
{{- $v := .root.Values -}}
{{- $spec := get $v .component }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "rag-monitor.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "rag-monitor.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ $spec.replicas }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "rag-monitor.selectorLabels" .root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
  template:
    metadata:
      annotations:
        {{- include "rag-monitor.checksums" . | nindent 8 }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      labels:
        {{- include "rag-monitor.labels" .root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- include "rag-monitor.podSpec" . | nindent 6 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      containers:
        - {{ include "rag-monitor.container" . | indent 10 | trim }}
      volumes:
        {{- include "rag-monitor.volumes" . | nindent 8 }}
{{- end }}

{{/* A rules file of the chart, parsed; the scrape job the rules select follows serviceMonitor.jobName. */}}
{{- define "rag-monitor.ruleGroups" -}}
{{- $text := .root.Files.Get .file }}
{{- if not $text }}{{ fail (printf "%s is missing from the chart" .file) }}{{ end }}
{{- $text = replace "job=\"rag-monitor\"" (printf "job=%q" .root.Values.serviceMonitor.jobName) $text }}
{{- with .root.Values.prometheusRule.grafanaUrl }}
{{- $text = replace "https://grafana.example.com/" (printf "%s/" (trimSuffix "/" .)) $text }}
{{- end }}
{{- with .root.Values.prometheusRule.runbookUrl }}
{{- $text = replace "https://github.com/rag-monitor/rag-monitor/blob/main/deploy/runbooks.md" . $text }}
{{- end }}
{{- $parsed := $text | fromYaml }}
{{- if hasKey $parsed "Error" }}{{ fail (printf "%s: %s" .file $parsed.Error) }}{{ end }}
{{- toYaml $parsed }}
{{- end }}
