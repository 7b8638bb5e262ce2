{{/* The same name the noetl chart computes for the NATS URL (noetl.natsFullname). */}}
{{- define "nats.fullname" -}}
{{- $name := default "nats" .Values.nameOverride }}
{{- $full := printf "%s-%s" .Release.Name $name }}
{{- if .Values.fullnameOverride }}
{{- $full = .Values.fullnameOverride }}
{{- else if contains $name .Release.Name }}
{{- $full = .Release.Name }}
{{- end }}
{{- $full | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nats.selectorLabels" -}}
app.kubernetes.io/name: nats
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nats.labels" -}}
{{ include "nats.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "nats.replicas" -}}
{{- if .Values.config.cluster.enabled }}{{ .Values.config.cluster.replicas | int }}{{ else }}1{{ end }}
{{- end }}
