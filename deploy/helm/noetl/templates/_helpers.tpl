{{/*
Expand the name of the chart.
*/}}
{{- define "noetl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "noetl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "noetl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A name for a component: "<fullname>-<suffix>", within 63 characters: the full name gives way,
so two suffixes never collide.
Input: (dict "ctx" $ "suffix" "server")
*/}}
{{- define "noetl.componentName" -}}
{{- $room := sub 62 (len .suffix) | int }}
{{- printf "%s-%s" (include "noetl.fullname" .ctx | trunc $room | trimSuffix "-") .suffix | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels. Input: (dict "ctx" $ "component" "server"|"worker"|"" "pool" NAME|"")
*/}}
{{- define "noetl.labels" -}}
helm.sh/chart: {{ include "noetl.chart" .ctx }}
{{ include "noetl.selectorLabels" . }}
{{- if .ctx.Chart.AppVersion }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: noetl
{{- end }}

{{/*
Selector labels. A worker pool's pods carry noetl.io/pool so that each pool's Deployment,
and its PodDisruptionBudget, select only their own pods.
*/}}
{{- define "noetl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "noetl.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- with .pool }}
noetl.io/pool: {{ . }}
{{- end }}
{{- end }}

{{/*
Name of the ServiceAccount to use.
*/}}
{{- define "noetl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "noetl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The noetl image.
*/}}
{{- define "noetl.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The NATS URL: the bundled NATS chart's client Service when nats.enabled (named the way that
chart names it), else nats.url.
*/}}
{{- define "noetl.natsFullname" -}}
{{- $name := default "nats" .Values.nats.nameOverride }}
{{- $full := printf "%s-%s" .Release.Name $name }}
{{- if .Values.nats.fullnameOverride }}
{{- $full = .Values.nats.fullnameOverride }}
{{- else if contains $name .Release.Name }}
{{- $full = .Release.Name }}
{{- end }}
{{- $full | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "noetl.natsUrl" -}}
{{- if .Values.nats.enabled }}
{{- printf "nats://%s:4222" (include "noetl.natsFullname" .) }}
{{- else }}
{{- required "nats.url is required when nats.enabled is false" .Values.nats.url }}
{{- end }}
{{- end }}

{{/*
Servers of the bundled NATS cluster (the official chart's StatefulSet): nats.config.cluster.replicas
when nats.config.cluster.enabled (that chart's default is 3), else one server.
*/}}
{{- define "noetl.natsClusterSize" -}}
{{- $cluster := dig "config" "cluster" dict .Values.nats }}
{{- if $cluster.enabled }}
{{- $cluster.replicas | default 3 | int }}
{{- else }}
{{- 1 }}
{{- end }}
{{- end }}

{{/*
Copies JetStream keeps of every NOETL stream, KV bucket and object store (NOETL_REPLICAS):
jetstream.replicas when set; else, with the bundled NATS, 3 (or its size when smaller); else 1.
With the bundled NATS a count above its size fails the render: JetStream could never place it.
An external cluster cannot be checked here; the processes refuse to start against it instead.
*/}}
{{- define "noetl.jetstreamReplicas" -}}
{{- $set := (.Values.jetstream | default dict).replicas }}
{{- $replicas := 1 }}
{{- if .Values.nats.enabled }}
{{- $size := include "noetl.natsClusterSize" . | int }}
{{- $replicas = min 3 $size }}
{{- if $set }}
{{- $replicas = int $set }}
{{- if gt $replicas $size }}
{{- fail (printf "jetstream.replicas is %d but the bundled NATS cluster has %d server(s) (nats.config.cluster.enabled/replicas): JetStream cannot keep %d copies on %d server(s); set jetstream.replicas to at most %d, or nats.config.cluster.replicas to at least %d" $replicas $size $replicas $size $size $replicas) }}
{{- end }}
{{- end }}
{{- else if $set }}
{{- $replicas = int $set }}
{{- end }}
{{- $replicas }}
{{- end }}

{{/*
Replicas of a worker pool: its replicaCount, else 2 (a lost node leaves the pool a worker).
Input: the pool.
*/}}
{{- define "noetl.poolReplicas" -}}
{{- ternary .replicaCount 2 (hasKey . "replicaCount") | int }}
{{- end }}

{{/*
Preferred pod anti-affinity across nodes (kubernetes.io/hostname) for the pods of one component,
used when no affinity is configured: replicas land on different nodes whenever there is room.
Input: (dict "ctx" $ "component" "server"|"worker" "pool" NAME|"")
*/}}
{{- define "noetl.spreadAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "noetl.selectorLabels" . | nindent 12 }}
{{- end }}

{{/*
Keys of the chart's own Secret: only the values given inline whose block names no
existingSecret. Output: YAML map of key -> plain value (empty map when nothing is inline).
*/}}
{{- define "noetl.secretData" -}}
{{- $d := dict }}
{{- if not .Values.nats.auth.existingSecret }}
{{- with .Values.nats.auth.user }}{{ $_ := set $d "nats-user" . }}{{ end }}
{{- with .Values.nats.auth.password }}{{ $_ := set $d "nats-password" . }}{{ end }}
{{- with .Values.nats.auth.token }}{{ $_ := set $d "nats-token" . }}{{ end }}
{{- end }}
{{- if not .Values.credentials.existingSecret }}
{{- with .Values.credentials.key }}{{ $_ := set $d "credentials-key" . }}{{ end }}
{{- end }}
{{- if not .Values.auth.existingSecret }}
{{- $generated := include "noetl.generatedApiTokens" . | fromYaml }}
{{- $_ := set $d "api-token" (.Values.auth.apiToken | default (get $generated "api-token")) }}
{{- $_ := set $d "api-admin-token" (.Values.auth.adminToken | default (get $generated "api-admin-token")) }}
{{- if not (get $d "api-token") }}{{ $_ := unset $d "api-token" }}{{ end }}
{{- if not (get $d "api-admin-token") }}{{ $_ := unset $d "api-admin-token" }}{{ end }}
{{- end }}
{{- with .Values.auth.principals }}
{{- $plain := list }}
{{- range . }}{{ $plain = append $plain (omit . "natsPassword") }}{{ end }}
{{- $_ := set $d "auth.yaml" (dict "principals" $plain | toYaml) }}
{{- end }}
{{- toYaml $d }}
{{- end }}

{{/*
The nats-server `authorization` block for auth.natsAuthorization (docs/security.md#nats): the
chart's own user may use every subject (it is the engine); a principal with a natsPassword gets
only the NATS service `noetl.api.*` (which checks its token against its namespaces) and its own
inbox `_INBOX_<name>.>` (connect with that inbox prefix), never `noetl.requests.*`, `noetl.events.*`
or a KV bucket; an admin also reaches JetStream and KV for the `noetl` CLI. Output: JSON, which
nats-server's configuration format reads.
*/}}
{{- define "noetl.natsAuthorization" -}}
{{- $users := list }}
{{- with .Values.nats.auth }}
{{- if and .user .password }}
{{- $users = append $users (dict "user" .user "password" .password "permissions" (dict "publish" (dict "allow" (list ">")) "subscribe" (dict "allow" (list ">")))) }}
{{- end }}
{{- end }}
{{- range .Values.auth.principals }}
{{- if .natsPassword }}
{{- $inbox := printf "_INBOX_%s.>" .name }}
{{- $pub := list "noetl.api.status" "noetl.api.schedule.list" }}
{{- $subs := list $inbox }}
{{- if eq .role "operator" }}{{ $pub = list "noetl.api.>" }}{{ end }}
{{- if eq .role "admin" }}
{{- $pub = list "noetl.api.>" "$JS.API.>" "$KV.>" "$O.>" "$JS.ACK.>" "noetl.audit.>" }}
{{- $subs = list $inbox "noetl.events.>" }}
{{- end }}
{{- $users = append $users (dict "user" .name "password" .natsPassword "permissions" (dict "publish" (dict "allow" $pub) "subscribe" (dict "allow" $subs))) }}
{{- end }}
{{- end }}
{{- /* toPrettyJson writes ">" as \u003e: nats-server wants the subject as it is */}}
{{- dict "users" $users | toPrettyJson | replace "\\u003e" ">" }}
{{- end }}

{{/*
The API tokens the chart makes up, secure by default: with the server enabled, no
auth.existingSecret and auth.insecure false, each of auth.apiToken and auth.adminToken left empty gets one. The value
already in the chart's Secret is kept (a helm upgrade does not change it); without one (a first
install, or `helm template`, where lookup finds nothing) it is 48 random characters. Made once
per render (kept in the root context), so the Secret and the pods' checksum of it agree.
Output: YAML map of key -> plain value, only for the keys generated.
*/}}
{{- define "noetl.generatedApiTokens" -}}
{{- if not (hasKey . "noetlGeneratedApiTokens") }}
{{- $gen := dict }}
{{- with .Values.auth }}
{{- if and $.Values.server.enabled (not (or .existingSecret .insecure)) }}
{{- $want := list }}
{{- if not .apiToken }}{{ $want = append $want "api-token" }}{{ end }}
{{- if not .adminToken }}{{ $want = append $want "api-admin-token" }}{{ end }}
{{- if $want }}
{{- $existing := lookup "v1" "Secret" $.Release.Namespace (include "noetl.fullname" $) }}
{{- $kept := dig "data" dict ($existing | default dict) }}
{{- range $key := $want }}
{{- $old := get $kept $key | default "" | b64dec }}
{{- $_ := set $gen $key ($old | default (randAlphaNum 48)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set . "noetlGeneratedApiTokens" $gen }}
{{- end }}
{{- toYaml (get . "noetlGeneratedApiTokens") }}
{{- end }}

{{/*
One env var read from a Secret key. Input: (dict "env" NAME "secret" SECRET "key" KEY "optional" BOOL)
*/}}
{{- define "noetl.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end }}

{{/*
Environment shared by the server and the workers: NATS auth and TLS, the keychain key.
Secrets reach the process only through secretKeyRef, never through the ConfigMap or args.
*/}}
{{- define "noetl.env" -}}
{{- $own := include "noetl.fullname" . }}
{{- $data := include "noetl.secretData" . | fromYaml -}}
- name: HOME
  value: /tmp
{{- with .Values.nats.auth }}
{{- if .existingSecret }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_NATS_USER" "secret" .existingSecret "key" "nats-user" "optional" true) }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_NATS_PASSWORD" "secret" .existingSecret "key" "nats-password" "optional" true) }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_NATS_TOKEN" "secret" .existingSecret "key" "nats-token" "optional" true) }}
{{- else }}
{{- if hasKey $data "nats-user" }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_NATS_USER" "secret" $own "key" "nats-user") }}
{{- end }}
{{- if hasKey $data "nats-password" }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_NATS_PASSWORD" "secret" $own "key" "nats-password") }}
{{- end }}
{{- if hasKey $data "nats-token" }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_NATS_TOKEN" "secret" $own "key" "nats-token") }}
{{- end }}
{{- end }}
{{- if .credsSecret }}
- name: NOETL_NATS_CREDS
  value: /etc/noetl/nats-creds/nats.creds
{{- end }}
{{- end }}
{{- with .Values.nats.tls }}
{{- if .enabled }}
- name: NOETL_NATS_TLS_CA
  value: {{ printf "/etc/noetl/nats-tls/%s" .ca | quote }}
{{- if and .cert .key }}
- name: NOETL_NATS_TLS_CERT
  value: {{ printf "/etc/noetl/nats-tls/%s" .cert | quote }}
- name: NOETL_NATS_TLS_KEY
  value: {{ printf "/etc/noetl/nats-tls/%s" .key | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.credentials.existingSecret }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_CREDENTIALS_KEY" "secret" .Values.credentials.existingSecret "key" "credentials-key") }}
{{- else if hasKey $data "credentials-key" }}
{{ include "noetl.secretEnv" (dict "env" "NOETL_CREDENTIALS_KEY" "secret" $own "key" "credentials-key") }}
{{- end }}
{{- end }}

{{/*
Volume mounts shared by the server and the workers. /tmp is writable; the root filesystem is not.
*/}}
{{- define "noetl.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.nats.tls.enabled }}
- name: nats-tls
  mountPath: /etc/noetl/nats-tls
  readOnly: true
{{- end }}
{{- if .Values.nats.auth.credsSecret }}
- name: nats-creds
  mountPath: /etc/noetl/nats-creds
  readOnly: true
{{- end }}
{{- end }}

{{/*
Volumes matching noetl.volumeMounts. Secret files are readable by the pod's group only (0440).
*/}}
{{- define "noetl.volumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.nats.tls.enabled }}
- name: nats-tls
  secret:
    secretName: {{ required "nats.tls.existingSecret is required when nats.tls.enabled" .Values.nats.tls.existingSecret }}
    defaultMode: 288
{{- end }}
{{- with .Values.nats.auth.credsSecret }}
- name: nats-creds
  secret:
    secretName: {{ . }}
    defaultMode: 288
    items:
      - key: nats.creds
        path: nats.creds
{{- end }}
{{- end }}

{{/*
Pod annotations that roll the pods when the ConfigMap or the chart's Secret changes.
*/}}
{{- define "noetl.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}

{{/*
The bundled NATS must schedule messages (timers and cron schedules: nats-server 2.14 or later).
The NATS chart 1.2 alone installs 2.11, which accepts a schedule and never fires it, so an older
tag fails the render. A tag that names no version (a digest, "latest") is left alone: the
processes check the version at start and refuse an old one themselves.
*/}}
{{- define "noetl.natsImageCheck" -}}
{{- if .Values.nats.enabled }}
{{- $image := ((.Values.nats.container | default dict).image | default dict) }}
{{- $tag := toString ($image.tag | default "") }}
{{- $version := regexFind "^v?[0-9]+\\.[0-9]+(\\.[0-9]+)?" $tag | trimPrefix "v" }}
{{- if and $version (semverCompare "<2.14.0-0" $version) }}
{{- fail (printf "nats.container.image.tag is %s: the bundled NATS must be nats-server 2.14 or later (JetStream message scheduling with cron, which NoETL's timers and schedules need; older servers accept a schedule and never fire it); set nats.container.image.tag to 2.15.1-alpine or later" $tag) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A pool's name in resource names: the DSL accepts letters, digits, '-' and '_' (etl_jobs), a
Kubernetes name only lowercase letters, digits and '-'. Labels keep the pool's own name.
Input: the pool's name.
*/}}
{{- define "noetl.poolSlug" -}}
{{- . | lower | replace "_" "-" }}
{{- end }}

{{/*
A pool's image: its own `image` (repository, tag, pullPolicy) over the chart's.
Input: (dict "ctx" $ "pool" POOL). Output: YAML {ref, pullPolicy}.
*/}}
{{- define "noetl.poolImage" -}}
{{- $own := .pool.image | default dict }}
{{- $v := .ctx.Values.image }}
{{- $ref := printf "%s:%s" ($own.repository | default $v.repository) ($own.tag | default $v.tag | default .ctx.Chart.AppVersion) }}
ref: {{ $ref | quote }}
pullPolicy: {{ $own.pullPolicy | default $v.pullPolicy }}
{{- end }}

{{/*
A pool's block (autoscaling, keda): the worker-wide one with the pool's own keys set over it.
Key by key, not sprig's merge, which lets no `false` of the pool override a worker-wide `true`.
Input: (dict "ctx" $ "pool" POOL "key" NAME). Output: YAML map.
*/}}
{{- define "noetl.poolBlock" -}}
{{- $out := deepCopy ((get .ctx.Values.worker .key) | default dict) }}
{{- range $k, $v := ((get .pool .key) | default dict) }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
Whether a pool's replica count is left to an autoscaler (HPA or KEDA): the Deployment then
names no `replicas`, or every upgrade would reset what the autoscaler chose.
Input: (dict "ctx" $ "pool" POOL). Output: "hpa", "keda" or "".
*/}}
{{- define "noetl.poolScaler" -}}
{{- $hpa := include "noetl.poolBlock" (dict "ctx" .ctx "pool" .pool "key" "autoscaling") | fromYaml }}
{{- $keda := include "noetl.poolBlock" (dict "ctx" .ctx "pool" .pool "key" "keda") | fromYaml }}
{{- if and $hpa.enabled $keda.enabled }}
{{- fail (printf "worker pool %q: autoscaling (HPA) and keda are both enabled; KEDA makes an HPA of its own, choose one" .pool.name) }}
{{- end }}
{{- if $keda.enabled }}keda{{ else if $hpa.enabled }}hpa{{ end }}
{{- end }}

{{/*
HTTP probes of a container on its port named http. Input: (dict "live" PATH "ready" PATH "startup" THRESHOLD).
*/}}
{{- define "noetl.probes" -}}
startupProbe:  # a slow start (an image pull, NATS electing) is not a failed liveness
  httpGet:
    path: /live
    port: http
  periodSeconds: 2
  timeoutSeconds: 3
  failureThreshold: {{ .startup | default 30 }}
livenessProbe:  # /live: up whatever NATS does (a restart would not bring NATS back)
  httpGet:
    path: /live
    port: http
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /ready
    port: http
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end }}
