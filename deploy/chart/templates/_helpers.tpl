{{/* The labels every object of the release carries. */}}
{{- define "wasmprov.labels" -}}
app.kubernetes.io/name: wasmprov
{{ include "wasmprov.releaseLabels" . }}
{{- end }}

{{/* Which release and chart made an object. */}}
{{- define "wasmprov.releaseLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The host image. */}}
{{- define "wasmprov.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Lease of the central hosts' leader: the provisioner name, `/` made `-`. */}}
{{- define "wasmprov.leaderLease" -}}
{{ .Values.central.provisionerName | replace "/" "-" }}
{{- end }}

{{/* The arguments both hosts take. */}}
{{- define "wasmprov.commonArgs" -}}
- run
- --plugins-dir=/etc/wasmprov/plugins
- --policy=/etc/wasmprov/policy/policy.yaml
- --cache-dir=/var/cache/wasmprov
- --log-format={{ .Values.logFormat }}
{{- if .Values.addFinalizer }}
- --add-finalizer
{{- end }}
{{- if .Values.claimFinalizer }}
- --claim-finalizer
{{- end }}
{{- end }}

{{/* Probes on the metrics port. */}}
{{- define "wasmprov.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
{{- end }}

{{- define "wasmprov.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "wasmprov.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* The plugins volume of one side: its ConfigMaps, projected, or its image. */}}
{{- define "wasmprov.pluginsVolume" -}}
{{- if .image.reference }}
{{- if .configMaps }}
{{- fail (printf "plugins.%sImage replaces the %s hosts' plugin ConfigMaps: set plugins.%s to [] (the image holds every plugin of that side)" .side .side .side) }}
{{- end }}
- name: plugins
  image:
    reference: {{ .image.reference }}
    pullPolicy: {{ .image.pullPolicy | default "IfNotPresent" }}
{{- else }}
- name: plugins
  projected:
    {{- if .configMaps }}
    sources:
      {{- range .configMaps }}
      - configMap:
          name: {{ . }}
      {{- end }}
    {{- else }}
    sources: []
    {{- end }}
{{- end }}
{{- end }}
