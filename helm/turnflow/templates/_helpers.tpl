{{/*
Names, labels and the pieces every pod shares. Kept to a small subset of the template language
(include, if/else, range, toYaml, nindent, quote, default) so the tests can render it without a
cluster.
*/}}

{{- define "turnflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name; the release name alone when it already contains the chart name. */}}
{{- define "turnflow.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "turnflow.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "turnflow.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "turnflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "turnflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "turnflow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "turnflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: turnflow
{{- end -}}

{{- define "turnflow.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "turnflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "turnflow.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Environment variables every service reads from existing Secrets: DATABASE_URL and the Kafka
SASL password. Only references are rendered; the values stay in the Secrets.
*/}}
{{- define "turnflow.secretEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.databaseUrl.name }}
      key: {{ .Values.secrets.databaseUrl.key }}
{{- if .Values.secrets.kafkaSaslPassword.name }}
- name: KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.kafkaSaslPassword.name }}
      key: {{ .Values.secrets.kafkaSaslPassword.key }}
{{- end }}
{{- end -}}

{{/*
The model providers' API keys, from existing Secrets: only the consumer calls a model, so only
its pods get them (a scheduler pod that leaks its environment leaks no model key).
*/}}
{{- define "turnflow.modelKeyEnv" -}}
{{- range $env, $ref := .Values.secrets.modelKeys }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
      optional: {{ $ref.optional | default false }}
{{- end }}
{{- end -}}

{{/* Container fields shared by the consumer and the scheduler; each adds its own env. */}}
{{- define "turnflow.serviceContainer" -}}
image: {{ include "turnflow.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
envFrom:
  - configMapRef:
      name: {{ include "turnflow.fullname" . }}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  {{- toYaml .Values.probes.readiness | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- if .Values.kafka.tls.caSecret.name }}
  - name: kafka-ca
    mountPath: /etc/turnflow/kafka-ca
    readOnly: true
  {{- end }}
{{- end -}}

{{/* Pod-level fields shared by the consumer and the scheduler. */}}
{{- define "turnflow.podCommon" -}}
serviceAccountName: {{ include "turnflow.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  # The root filesystem is read-only; Python and the libraries get a small scratch directory.
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- if .Values.kafka.tls.caSecret.name }}
  - name: kafka-ca
    secret:
      secretName: {{ .Values.kafka.tls.caSecret.name }}
      items:
        - key: {{ .Values.kafka.tls.caSecret.key }}
          path: ca.crt
  {{- end }}
{{- end -}}

{{/* nodeSelector, tolerations, affinity and spread constraints of one component. */}}
{{- define "turnflow.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
