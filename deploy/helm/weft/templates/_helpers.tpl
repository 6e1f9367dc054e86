{{- define "weft.name" -}}weft{{- end -}}

{{- define "weft.labels" -}}
app.kubernetes.io/name: weft
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "weft.selector" -}}
app.kubernetes.io/name: weft
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "weft.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "weft.vendorPlugins" -}}
{{- if or .Values.plugins.configMap .Values.plugins.oci.reference -}}true{{- end -}}
{{- end -}}
