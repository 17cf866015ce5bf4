{{/* The release's name for every object (a release named hookd is just "hookd"). */}}
{{- define "hookd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects the pods: stable across upgrades. */}}
{{- define "hookd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hookd.labels" -}}
{{ include "hookd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The environment variable a token is read from. */}}
{{- define "hookd.tokenEnv" -}}
{{- printf "HOOKD_TOKEN_%s" (. | upper | replace "-" "_" | replace "." "_") -}}
{{- end -}}
