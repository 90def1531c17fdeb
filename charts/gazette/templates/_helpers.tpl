{{/* Names, labels, images, and the pieces every workload of the chart shares. */}}

{{- define "gazette.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object: the release name, unless it lacks the chart's name. */}}
{{- define "gazette.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gazette.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gazette.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "broker"). */}}
{{- define "gazette.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gazette.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gazette.componentLabels" -}}
{{ include "gazette.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference: (dict "ctx" $ "image" .Values.image.broker). */}}
{{- define "gazette.image" -}}
{{- $registry := .ctx.Values.image.registry -}}
{{- $tag := default .ctx.Chart.AppVersion .image.tag -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "gazette.brokerName" -}}{{ include "gazette.fullname" . }}-broker{{- end -}}
{{- define "gazette.etcdName" -}}{{ include "gazette.fullname" . }}-etcd{{- end -}}
{{- define "gazette.s3Name" -}}{{ include "gazette.fullname" . }}-s3{{- end -}}
{{- define "gazette.operatorName" -}}{{ include "gazette.fullname" . }}-operator{{- end -}}

{{/* The etcd endpoint of brokers, consumers and the operator. */}}
{{- define "gazette.etcdAddress" -}}
{{- if .Values.etcd.bundled.enabled -}}
{{- if or .Values.etcd.tls.secretName .Values.etcd.username .Values.etcd.passwordSecret.name -}}
{{- fail "etcd.tls, etcd.username and etcd.passwordSecret are for an etcd you run: set etcd.bundled.enabled=false and etcd.external.endpoint (the bundled etcd has users of the chart's own: etcd.bundled.auth)" -}}
{{- end -}}
http://{{ include "gazette.etcdName" . }}.{{ .Release.Namespace }}.svc:2379
{{- else -}}
{{- required "etcd.external.endpoint is required when etcd.bundled.enabled is false" .Values.etcd.external.endpoint -}}
{{- end -}}
{{- end -}}

{{/* The gRPC address of the brokers' client Service. */}}
{{- define "gazette.brokerAddress" -}}
{{ include "gazette.brokerScheme" . }}://{{ include "gazette.brokerName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.broker.port }}
{{- end -}}

{{/* The S3 endpoint: the trial server's Service, or storage.s3.endpoint. */}}
{{- define "gazette.s3Endpoint" -}}
{{- if .Values.storage.trialServer.enabled -}}
http://{{ include "gazette.s3Name" . }}.{{ .Release.Namespace }}.svc:9000
{{- else -}}
{{- .Values.storage.s3.endpoint -}}
{{- end -}}
{{- end -}}

{{/* The fragment store URL that Journal specs name (spec.fragment.stores). */}}
{{- define "gazette.storeURL" -}}
{{- $s := .Values.storage -}}
{{- $prefix := $s.prefix -}}
{{- if eq $s.type "s3" -}}
{{- $query := list -}}
{{- $endpoint := include "gazette.s3Endpoint" . -}}
{{- if $endpoint -}}{{- $query = append $query (printf "endpoint=%s" ($endpoint | urlquery)) -}}{{- end -}}
{{- if $s.s3.region -}}{{- $query = append $query (printf "region=%s" $s.s3.region) -}}{{- end -}}
s3://{{ $s.bucket }}/{{ $prefix }}{{ if $query }}?{{ join "&" $query }}{{ end }}
{{- else if eq $s.type "gcs" -}}
gs://{{ $s.bucket }}/{{ $prefix }}
{{- else if eq $s.type "azure" -}}
{{ $s.azure.scheme }}://{{ required "storage.azure.accountName is required for azure storage" $s.azure.accountName }}/{{ $s.bucket }}/{{ $prefix }}
{{- end -}}
{{- end -}}

{{/* Whether zones come from the pod's topology label (else an init container). */}}
{{- define "gazette.zoneFrom" -}}
{{- $from := .Values.zone.from -}}
{{- if eq $from "auto" -}}
{{- if semverCompare ">=1.35.0-0" .Capabilities.KubeVersion.Version -}}podLabel{{- else -}}node{{- end -}}
{{- else -}}
{{- $from -}}
{{- end -}}
{{- end -}}

{{/*
The zone environment variable (BROKER_ZONE or CONSUMER_ZONE) of a container:
(dict "ctx" $ "var" "BROKER_ZONE"). In node mode the variable is set by the
container's shell wrapper from the file the init container wrote, so nothing here.
*/}}
{{- define "gazette.zoneEnv" -}}
{{- $from := include "gazette.zoneFrom" .ctx -}}
{{- if eq $from "podLabel" }}
- name: {{ .var }}
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['{{ .ctx.Values.zone.label }}']
{{- else if eq $from "fixed" }}
- name: {{ .var }}
  value: {{ .ctx.Values.zone.fixed | quote }}
{{- end }}
{{- end -}}

{{/*
The command of a container that needs its zone: in node mode a shell exports the
zone the init container wrote, then execs the process with the args.
(dict "ctx" $ "var" "BROKER_ZONE" "command" (list "python" "-m" "gazette.broker")).
*/}}
{{- define "gazette.zoneCommand" -}}
{{- if eq (include "gazette.zoneFrom" .ctx) "node" -}}
{{- $exec := printf "%s=\"$(cat /run/gazette/zone/zone)\"; export %s; exec %s \"$@\"" .var .var (join " " .command) -}}
{{ toJson (list "/bin/sh" "-ec" $exec "--") }}
{{- else -}}
{{ toJson .command }}
{{- end -}}
{{- end -}}

{{/* The init container of node mode, and its volumes (token for it alone, zone file). */}}
{{- define "gazette.zoneInitContainer" -}}
{{- if eq (include "gazette.zoneFrom" .ctx) "node" }}
- name: node-zone
  image: {{ include "gazette.image" (dict "ctx" .ctx "image" .image) }}
  imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
  command: ["python", "/opt/gazette/scripts/node-zone.py"]
  env:
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    - name: ZONE_LABEL
      value: {{ .ctx.Values.zone.label | quote }}
    - name: ZONE_FILE
      value: /run/gazette/zone/zone
  securityContext:
    {{- toYaml .ctx.Values.securityContext | nindent 4 }}
  resources:
    requests:
      cpu: 10m
      memory: 32Mi
    limits:
      memory: 64Mi
  volumeMounts:
    - name: zone
      mountPath: /run/gazette/zone
    - name: scripts
      mountPath: /opt/gazette/scripts
      readOnly: true
    - name: node-reader-token
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
{{- end }}
{{- end -}}

{{- define "gazette.zoneVolumes" -}}
{{- if eq (include "gazette.zoneFrom" .) "node" }}
- name: zone
  emptyDir:
    sizeLimit: 1Mi
- name: scripts
  configMap:
    name: {{ include "gazette.fullname" . }}-scripts
- name: node-reader-token
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3600
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
{{- end }}
{{- end -}}

{{- define "gazette.zoneVolumeMounts" -}}
{{- if eq (include "gazette.zoneFrom" .) "node" }}
- name: zone
  mountPath: /run/gazette/zone
  readOnly: true
{{- end }}
{{- end -}}

{{/* Bucket credentials of processes that read or write fragments. */}}
{{- define "gazette.storageEnv" -}}
{{- $s := .Values.storage -}}
{{- if eq $s.type "s3" }}
- name: AWS_REGION
  value: {{ $s.s3.region | quote }}
{{- if $s.trialServer.enabled }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "gazette.s3Name" . }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "gazette.s3Name" . }}
      key: AWS_SECRET_ACCESS_KEY
{{- else if $s.s3.credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $s.s3.credentialsSecret }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $s.s3.credentialsSecret }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- else if and (eq $s.type "gcs") $s.gcs.credentialsSecret }}
- name: GOOGLE_APPLICATION_CREDENTIALS
  value: /var/run/secrets/gazette/gcs/{{ $s.gcs.key }}
{{- else if and (eq $s.type "azure") $s.azure.credentialsSecret }}
- name: AZURE_ACCOUNT_NAME
  value: {{ $s.azure.accountName | quote }}
{{- end }}
{{- end -}}

{{- define "gazette.storageEnvFrom" -}}
{{- $s := .Values.storage -}}
{{- if and (eq $s.type "azure") $s.azure.credentialsSecret }}
- secretRef:
    name: {{ $s.azure.credentialsSecret }}
{{- end }}
{{- end -}}

{{- define "gazette.storageVolumes" -}}
{{- $s := .Values.storage -}}
{{- if and (eq $s.type "gcs") $s.gcs.credentialsSecret }}
- name: gcs-credentials
  secret:
    secretName: {{ $s.gcs.credentialsSecret }}
{{- end }}
{{- end -}}

{{- define "gazette.storageVolumeMounts" -}}
{{- $s := .Values.storage -}}
{{- if and (eq $s.type "gcs") $s.gcs.credentialsSecret }}
- name: gcs-credentials
  mountPath: /var/run/secrets/gazette/gcs
  readOnly: true
{{- end }}
{{- end -}}

{{/* Spread over zones and hosts: (dict "ctx" $ "component" "broker" "spread" .Values.broker.topologySpread). */}}
{{- define "gazette.topologySpread" -}}
- maxSkew: {{ default 1 .spread.zoneMaxSkew }}
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: {{ .spread.zoneWhenUnsatisfiable }}
  {{- if and .spread.minDomains (eq .spread.zoneWhenUnsatisfiable "DoNotSchedule") }}
  minDomains: {{ .spread.minDomains }}
  {{- end }}
  labelSelector:
    matchLabels:
      {{- include "gazette.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
- maxSkew: {{ default 1 .spread.hostnameMaxSkew }}
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: {{ .spread.hostnameWhenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- include "gazette.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
{{- end -}}

{{/* Go duration (e.g. 90s, 2m, 1h30m) to whole seconds, for the grace-period check. */}}
{{- define "gazette.durationSeconds" -}}
{{- $total := 0.0 -}}
{{- range $m := regexFindAll "[0-9.]+(h|ms|m|s)" . -1 -}}
{{- $n := float64 (regexFind "[0-9.]+" $m) -}}
{{- $unit := regexReplaceAll "[0-9.]+" $m "" -}}
{{- if eq $unit "h" -}}{{- $total = addf $total (mulf $n 3600) -}}
{{- else if eq $unit "m" -}}{{- $total = addf $total (mulf $n 60) -}}
{{- else if eq $unit "s" -}}{{- $total = addf $total $n -}}
{{- else if eq $unit "ms" -}}{{- $total = addf $total (divf $n 1000) -}}
{{- end -}}
{{- end -}}
{{- ceil $total | int -}}
{{- end -}}

{{/* Whether the bundled etcd runs with auth on (its users are the chart's own). */}}
{{- define "gazette.bundledEtcdAuth" -}}
{{- if and .Values.etcd.bundled.enabled .Values.etcd.bundled.auth.enabled -}}true{{- end -}}
{{- end -}}

{{/* The Secret of the bundled etcd's passwords. */}}
{{- define "gazette.etcdAuthSecret" -}}{{ include "gazette.etcdName" . }}-auth{{- end -}}
