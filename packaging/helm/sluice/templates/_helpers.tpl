{{- define "sluice.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.labels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sluice.selector" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The node's sluice.yaml: the settings, the listeners the chart relies on, and either the
resources (file mode) or etcd (etcd mode). */}}
{{- define "sluice.config" -}}
{{- $c := deepCopy .Values.settings -}}
{{- $_ := set $c "listen" "0.0.0.0:9080" -}}
{{- $status := dict "listen" "0.0.0.0:9091" -}}
{{- with .Values.status.allow }}{{ $_ := set $status "allow" . }}{{ end -}}
{{- if .Values.status.keySecretName }}{{ $_ := set $status "key" "${{SLUICE_STATUS_KEY}}" }}{{ end -}}
{{- $_ := set $c "status" $status -}}
{{- if eq .Values.mode "etcd" -}}
{{- $_ := set $c "etcd" (dict "endpoints" .Values.etcd.endpoints "prefix" .Values.etcd.prefix "cache" "/var/lib/sluice/etcd-cache") -}}
{{- $_ := set $c "admin" (dict "listen" "0.0.0.0:9180" "key" "${{SLUICE_ADMIN_KEY}}") -}}
{{- else -}}
{{- $_ := set $c "admin" (dict "enabled" false) -}}
{{- $c = merge $c (deepCopy .Values.config) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}
