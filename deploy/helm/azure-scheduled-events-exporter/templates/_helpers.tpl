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

{{/* The agent's arguments: the flags (docs/configuration.md), then extraArgs, for the DaemonSet and
the test hook alike. A boolean true is the bare flag, false is --flag=false: a flag that is on by
default (approve.user-events) can be turned off. values.schema.json has already refused an unknown
flag or a value outside its syntax. */}}
{{- define "ase.args" -}}
{{- range $flag, $value := .Values.flags }}
{{- if and (kindIs "bool" $value) $value }}
- {{ printf "--%s" $flag | quote }}
{{- else }}
- {{ printf "--%s=%v" $flag $value | quote }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The state file of the Windows pods for an account other than SYSTEM: in the account's own profile,
which it may write, where %ProgramData%\azure-scheduled-events-exporter is SYSTEM's and the
administrators' only. */}}
{{- define "ase.windowsStateFile" -}}
{{- $profile := ternary "NetworkService" "LocalService" (eq . "NT AUTHORITY\\NetworkService") -}}
{{- printf "C:\\Windows\\ServiceProfiles\\%s\\AppData\\Local\\azure-scheduled-events-exporter\\state.json" $profile -}}
{{- end }}

{{/* Pod Security level the rendered pods need (docs/install.md#pod-security): "restricted" by default;
"privileged" for host networking, a hostPath state directory (and its root init container) and HostProcess
pods on Windows, which "baseline" refuses. */}}
{{- define "ase.podSecurityLevel" -}}
{{- if or .Values.hostNetwork .Values.state.persistent .Values.windows.enabled -}}
privileged
{{- else -}}
restricted
{{- end -}}
{{- end }}

{{/* The agent's environment, for the DaemonSets and the test hook alike: the chart's settings, then
env (which may use $(K8S_NODE_NAME)). Called with {"Values": .Values, "windows": true} for the Windows
DaemonSet, whose HostProcess agent keeps the Windows default state file on the node itself
(%ProgramData%\azure-scheduled-events-exporter\state.json). */}}
{{- define "ase.env" -}}
- name: AZURE_SCHEDULED_EVENTS_WEB_LISTEN_ADDRESS
  value: {{ printf ":%v" .Values.port | quote }}
- name: AZURE_SCHEDULED_EVENTS_LOG_FORMAT
  value: json
{{- if not .windows }}
- name: AZURE_SCHEDULED_EVENTS_STATE_FILE
  value: /var/lib/azure-scheduled-events-exporter/state.json
{{- else if ne .Values.windows.runAsUserName "NT AUTHORITY\\SYSTEM" }}
# A service account's own profile, which it may write (SYSTEM keeps the Windows default, %ProgramData%).
- name: AZURE_SCHEDULED_EVENTS_STATE_FILE
  value: {{ include "ase.windowsStateFile" .Values.windows.runAsUserName | quote }}
{{- end }}
# For the traces' Resource: which node and pod saw the event.
- name: K8S_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: K8S_NAMESPACE_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ include "ase.resourceAttributes" . | quote }}
{{- with .Values.kubernetes }}
{{- if .enabled }}
# The Node this pod runs on; events are still matched by the VM's name (compute.name).
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_TAINT_EVENTS
  value: {{ .taintEvents | quote }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_CORDON_EVENTS
  value: {{ .cordonEvents | quote }}
{{- with .resyncInterval }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_RESYNC_INTERVAL
  value: {{ . | quote }}
{{- end }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_EVENTS
  value: {{ .drainEvents | quote }}
{{- with .drainMargin }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_MARGIN
  value: {{ . | quote }}
{{- end }}
{{- with .drainDelay }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_DELAY
  value: {{ . | quote }}
{{- end }}
{{- with .drainPodSelector }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_POD_SELECTOR
  value: {{ . | quote }}
{{- end }}
{{- with .imdsUnknownAfter }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_IMDS_UNKNOWN_AFTER
  value: {{ . | quote }}
{{- end }}
{{- if .aksConditionNames }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_AKS_CONDITION_NAMES
  value: "true"
{{- end }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_EXCLUDE_FROM_LOAD_BALANCERS_EVENTS
  value: {{ .excludeFromLoadBalancersEvents | quote }}
{{- if .advisoryTaint }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_ADVISORY_TAINT
  value: "true"
{{- end }}
{{- if .dryRun }}
- name: AZURE_SCHEDULED_EVENTS_KUBERNETES_DRY_RUN
  value: "true"
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.env }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}
