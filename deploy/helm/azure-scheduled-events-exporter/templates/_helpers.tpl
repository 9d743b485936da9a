{{/* The chart's name, or nameOverride. */}}
{{- define "ase.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of every object: the release's name when it already says what this is. */}}
{{- define "ase.fullname" -}}
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

{{- define "ase.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ase.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ase.labels" -}}
{{ include "ase.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: azure-scheduled-events-exporter
{{- end }}

{{- define "ase.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ase.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ase.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The metrics path the agent serves: --web.telemetry-path when set in flags. */}}
{{- define "ase.metricsPath" -}}
{{- index .Values.flags "web.telemetry-path" | default "/metrics" }}
{{- end }}

{{/* OTEL_RESOURCE_ATTRIBUTES: the node and pod from the downward API (variables set before it), then
otelResourceAttributes, percent-encoded as the variable's syntax asks. */}}
{{- define "ase.resourceAttributes" -}}
{{- $pairs := list "k8s.node.name=$(K8S_NODE_NAME)" "k8s.pod.name=$(K8S_POD_NAME)" "k8s.namespace.name=$(K8S_NAMESPACE_NAME)" }}
{{- range $key, $value := .Values.otelResourceAttributes }}
{{- $pairs = append $pairs (printf "%s=%s" $key (urlquery (toString $value) | replace "+" "%20")) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* scheme and httpHeaders of the probes' httpGet: HTTPS with tls_server_config, an Authorization
header with basic_auth_users (--web.config.file). */}}
{{- define "ase.probeHttp" -}}
scheme: {{ .Values.probes.scheme }}
{{- with .Values.probes.httpHeaders }}
httpHeaders:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
