{{/* Names ------------------------------------------------------------------------------ */}}

{{- define "gpubus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release name + chart name, or just the release name when it already contains the chart name. */}}
{{- define "gpubus.fullname" -}}
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

{{- define "gpubus.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of one component's objects: <fullname>-<component>. Call with (dict "ctx" $ "component" "x"). */}}
{{- define "gpubus.componentName" -}}
{{- printf "%s-%s" (include "gpubus.fullname" .ctx) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels ----------------------------------------------------------------------------- */}}

{{- define "gpubus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpubus.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpubus.labels" -}}
helm.sh/chart: {{ include "gpubus.chart" .ctx }}
{{ include "gpubus.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: gpubus
{{- with .ctx.Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Service accounts ------------------------------------------------------------------- */}}

{{- define "gpubus.serviceAccountName" -}}
{{- if .ctx.Values.serviceAccount.create }}
{{- include "gpubus.componentName" . }}
{{- else }}
{{- "default" }}
{{- end }}
{{- end }}

{{/* Images ----------------------------------------------------------------------------- */}}

{{/* The gpubus image, with a service's `image` section overriding global.image. Call with (dict "ctx" $ "image" .Values.x.image). */}}
{{- define "gpubus.image" -}}
{{- $img := merge (deepCopy (default (dict) .image)) .ctx.Values.global.image }}
{{- $tag := default .ctx.Chart.AppVersion $img.tag }}
{{- if $img.registry }}
{{- printf "%s/%s:%s" $img.registry $img.repository $tag }}
{{- else }}
{{- printf "%s:%s" $img.repository $tag }}
{{- end }}
{{- end }}

{{- define "gpubus.pullPolicy" -}}
{{- (merge (deepCopy (default (dict) .image)) .ctx.Values.global.image).pullPolicy }}
{{- end }}

{{/* NATS ------------------------------------------------------------------------------- */}}

{{/* Client URL: global.nats.url, else the bundled subchart's Service (named like nats.fullname). */}}
{{- define "gpubus.natsUrl" -}}
{{- if .Values.global.nats.url }}
{{- .Values.global.nats.url }}
{{- else }}
{{- $svc := printf "%s-nats" .Release.Name }}
{{- if .Values.nats.fullnameOverride }}
{{- $svc = .Values.nats.fullnameOverride }}
{{- else if contains "nats" .Release.Name }}
{{- $svc = .Release.Name }}
{{- end }}
{{- printf "nats://%s.%s.svc:4222" ($svc | trunc 63 | trimSuffix "-") .Release.Namespace }}
{{- end }}
{{- end }}

{{/* Copies JetStream keeps of the event stream and every KV bucket: global.nats.replicas, else 3
on the bundled NATS when it runs as a cluster (nats.config.cluster.enabled; fewer only for a
smaller cluster), else 1. */}}
{{- define "gpubus.natsReplicas" -}}
{{- if .Values.global.nats.replicas }}
{{- .Values.global.nats.replicas }}
{{- else if and .Values.nats.enabled .Values.nats.config.cluster.enabled }}
{{- min 3 (int (default 3 .Values.nats.config.cluster.replicas)) }}
{{- else }}
{{- 1 }}
{{- end }}
{{- end }}

{{- define "gpubus.natsAuthSecret" -}}
{{- default .Values.natsAuth.secretName .Values.natsAuth.existingSecret }}
{{- end }}

{{/* Env of a service's NATS connection (shared.bus.BusSettings reads GPUBUS_BUS_*). Call with (dict "ctx" $ "user" "scheduler"). */}}
{{- define "gpubus.natsEnv" -}}
- name: GPUBUS_BUS_URL
  value: {{ include "gpubus.natsUrl" .ctx | quote }}
- name: GPUBUS_BUS_REPLICAS
  value: {{ include "gpubus.natsReplicas" .ctx | quote }}
{{- if .ctx.Values.natsAuth.enabled }}
- name: GPUBUS_BUS_USER
  value: {{ .user | quote }}
- name: GPUBUS_BUS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "gpubus.natsAuthSecret" .ctx }}
      key: {{ .user }}
{{- end }}
{{- end }}

{{/* NATS env of a node container (node-agent, monitor): its pod's token with per-node identity,
else the static user .user. NODE_NAME must be set before it. */}}
{{- define "gpubus.natsNodeEnv" -}}
{{- if .ctx.Values.nodeIdentity.enabled }}
- name: GPUBUS_BUS_URL
  value: {{ include "gpubus.natsUrl" .ctx | quote }}
- name: GPUBUS_BUS_REPLICAS
  value: {{ include "gpubus.natsReplicas" .ctx | quote }}
- name: GPUBUS_BUS_TOKEN_FILE
  value: /var/run/secrets/gpubus/nats/token
- name: GPUBUS_BUS_NODE
  value: $(NODE_NAME)
{{- else }}
{{- include "gpubus.natsEnv" . }}
{{- end }}
{{- end }}

{{/* The projected NATS token's mount in a node container (per-node identity). */}}
{{- define "gpubus.natsTokenMount" -}}
{{- if .Values.nodeIdentity.enabled }}
- name: nats-token
  mountPath: /var/run/secrets/gpubus/nats
  readOnly: true
{{- end }}
{{- end }}

{{/* Logging flags every gpubus service takes. */}}
{{- define "gpubus.logArgs" -}}
- --log-level={{ .Values.global.logLevel }}
{{- if .Values.global.logJson }}
- --log-json
{{- end }}
{{- end }}

{{/* Env every gpubus container gets. */}}
{{- define "gpubus.commonEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end }}

{{/* Resource names the extender manages (HAMi's defaults plus extras), in a stable order. */}}
{{- define "gpubus.managedResources" -}}
{{- $r := .Values.global.resourceNames }}
{{- $names := list $r.count $r.memory $r.memoryPercentage $r.cores $r.priority }}
{{- range concat $names .Values.scheduler.extender.extraManagedResources | uniq }}
- name: {{ . }}
  ignoredByScheduler: true
{{- end }}
{{- end }}

{{/* Restricted container security context for services that need no host access. */}}
{{- define "gpubus.restrictedSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}
