{{- define "llmdiag.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "llmdiag.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "llmdiag.serviceAccountName" -}}
{{- default (include "llmdiag.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* One run's targets: [""] for every namespace, else the namespaces named. */}}
{{- define "llmdiag.targets" -}}
{{- if .Values.namespaces -}}
{{- toJson .Values.namespaces -}}
{{- else -}}
{{- toJson (list "") -}}
{{- end -}}
{{- end -}}

{{/* The pod of a run; `.root` is the chart's context, `.namespace` the namespace to triage ("" for all);
`.serve` true: the pod of the `llmdiag serve` Deployment instead of a one-shot triage. */}}
{{- define "llmdiag.podTemplate" -}}
{{- $v := .root.Values -}}
metadata:
  labels:
    {{- include "llmdiag.labels" .root | nindent 4 }}
  {{- with $v.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "llmdiag.serviceAccountName" .root }}
  restartPolicy: {{ if .serve }}Always{{ else }}Never{{ end }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: {{ $v.runAsUser }}
    runAsGroup: {{ $v.runAsUser }}
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: llmdiag
      image: "{{ $v.image.repository }}:{{ $v.image.tag | default .root.Chart.AppVersion }}"
      imagePullPolicy: {{ $v.image.pullPolicy }}
      command: ["llmdiag"]
      args:
        {{- if .serve }}
        - serve
        - --listen=0.0.0.0:{{ $v.serve.port }}
        - --state-dir=/var/lib/llmdiag
        - --every={{ $v.serve.every }}
        {{- with $v.serve.deadline }}
        - --deadline={{ . }}
        {{- end }}
        - --keep-reports={{ $v.serve.keepReports }}
        - --keep-bytes={{ $v.serve.keepBytes | int64 }}
        - --alert-rate={{ $v.serve.alertRate }}
        {{- if $v.serve.alertToken.existingSecret }}
        - --alert-token-file=/etc/llmdiag-alert/{{ $v.serve.alertToken.key }}
        {{- end }}
        {{- if $v.serve.notifyUrl.existingSecret }}
        - --notify-url-file=/etc/llmdiag-notify/{{ $v.serve.notifyUrl.key }}
        {{- end }}
        {{- with $v.serve.externalUrl }}
        - --external-url={{ . }}
        {{- end }}
        {{- else }}
        - triage
        {{- end }}
        {{- if .namespace }}
        - --namespace={{ .namespace }}
        {{- else }}
        - --all-namespaces
        {{- end }}
        {{- if not .serve }}
        - --output=json
        {{- end }}
        - --no-local-gpu
        {{- with $v.triage.selector }}
        - --selector={{ . }}
        {{- end }}
        {{- with $v.triage.prometheusUrl }}
        - --prometheus-url={{ . }}
        {{- end }}
        {{- with $v.triage.prometheusService }}
        - --prometheus-service={{ . }}
        {{- end }}
        {{- with $v.config }}
        - --config=/etc/llmdiag/llmdiag.yaml
        {{- end }}
        {{- range $v.triage.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      env:
        - name: HOME
          value: /tmp
        {{- with $v.triage.prometheusToken.existingSecret }}
        - name: LLMDIAG_PROMETHEUS_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ . }}
              key: {{ $v.triage.prometheusToken.key }}
        {{- end }}
      {{- if .serve }}
      ports:
        - name: http
          containerPort: {{ $v.serve.port }}
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        periodSeconds: 30
        failureThreshold: 3
      readinessProbe:
        httpGet: {path: /readyz, port: http}
        periodSeconds: 10
      {{- end }}
      resources:
        {{- toYaml (.serve | default false | ternary $v.serve.resources $v.resources) | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if $v.config }}
        - name: config
          mountPath: /etc/llmdiag
          readOnly: true
        {{- end }}
        {{- if .serve }}
        - name: state
          mountPath: /var/lib/llmdiag
        {{- if $v.serve.alertToken.existingSecret }}
        - name: alert-token
          mountPath: /etc/llmdiag-alert
          readOnly: true
        {{- end }}
        {{- if $v.serve.notifyUrl.existingSecret }}
        - name: notify-url
          mountPath: /etc/llmdiag-notify
          readOnly: true
        {{- end }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ $v.tmpSizeLimit }}
    {{- if .serve }}
    - name: state
      {{- if $v.serve.state.existingClaim }}
      persistentVolumeClaim:
        claimName: {{ $v.serve.state.existingClaim }}
      {{- else }}
      emptyDir:
        sizeLimit: {{ $v.serve.state.sizeLimit }}
      {{- end }}
    {{- with $v.serve.alertToken.existingSecret }}
    - name: alert-token
      secret:
        secretName: {{ . }}
        defaultMode: 0400
    {{- end }}
    {{- with $v.serve.notifyUrl.existingSecret }}
    - name: notify-url
      secret:
        secretName: {{ . }}
        defaultMode: 0400
    {{- end }}
    {{- end }}
    {{- if $v.config }}
    - name: config
      configMap:
        name: {{ include "llmdiag.fullname" .root }}-config
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* A run's object name: the full name, plus the namespace when one CronJob/Job is made per namespace. */}}
{{- define "llmdiag.runName" -}}
{{- if .namespace -}}
{{- printf "%s-%s" (include "llmdiag.fullname" .root) .namespace | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- include "llmdiag.fullname" .root -}}
{{- end -}}
{{- end -}}

{{/* Values that cannot work, refused at render time with what to set. */}}
{{- define "llmdiag.checkValues" -}}
{{- if not (has .Values.rbac.scope (list "cluster" "namespace")) -}}
{{- fail (printf "rbac.scope must be cluster or namespace, not %q" .Values.rbac.scope) -}}
{{- end -}}
{{- if and .Values.serve.enabled (gt (len .Values.namespaces) 1) -}}
{{- fail "serve triages one namespace or all of them: list at most one in namespaces" -}}
{{- end -}}
{{- if and (eq .Values.rbac.scope "namespace") (not .Values.namespaces) -}}
{{- fail "rbac.scope=namespace grants pods/exec only in the namespaces triaged: list them in namespaces" -}}
{{- end -}}
{{- end -}}
