{{/* Names and labels shared by every template. */}}

{{- define "mpijob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release name alone when it already holds the chart name (release mpijob-operator ->
mpijob-operator), release-chart otherwise; at most 63 characters. */}}
{{- define "mpijob-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "mpijob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mpijob-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "mpijob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mpijob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mpijob-operator.labels" -}}
{{ include "mpijob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "mpijob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Rules copied from manifests/rbac/ by scripts/gen-deploy.py into files/rbac/, so that the
chart grants exactly what those manifests grant: (include "mpijob-operator.rules" (list $ "operator")). */}}
{{- define "mpijob-operator.rules" -}}
{{- $root := index . 0 -}}
{{- $name := printf "files/rbac/%s-rules.yaml" (index . 1) -}}
{{- $rules := $root.Files.Get $name -}}
{{- if not $rules -}}
{{- fail (printf "%s is missing: run make deploy" $name) -}}
{{- end -}}
{{- $rules | trim -}}
{{- end -}}
