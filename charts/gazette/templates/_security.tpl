{{/*
Authorization keys, TLS certificates and etcd credentials from Secrets (values
`security` and `etcd.tls`/`etcd.username`/`etcd.passwordSecret`). Each Secret is a
volume mounted read-only under /etc/gazette, never copied into the environment (except
the auth keys of clients, which sign tokens from them), so a Secret rotated in place
reaches the running pods: brokers reload their keys file when it changes.

Roles: broker, consumer, operator, client (helm test's gazctl). The auth keys are
mounted where they verify (brokers) and where the operator signs its lag tokens; the
operator's client certificate goes with them, where it checks Shards' lag.
*/}}

{{/* Whether the operator checks Shards' lag (operator.shardLagInterval > 0). */}}
{{- define "gazette.lagChecked" -}}
{{- if gt (float64 .Values.operator.shardLagInterval) 0.0 -}}true{{- end -}}
{{- end -}}

{{- define "gazette.tlsOn" -}}
{{- if .Values.security.tls.broker.secretName -}}true{{- end -}}
{{- end -}}

{{/* The Secret of one TLS use, with its defaults: (dict "ctx" $ "use" "peer"). */}}
{{- define "gazette.tlsSecret" -}}
{{- $t := .ctx.Values.security.tls -}}
{{- if eq .use "broker" -}}{{- $t.broker.secretName -}}
{{- else if eq .use "peer" -}}{{- $t.peer.secretName | default $t.broker.secretName -}}
{{- else if eq .use "client" -}}{{- $t.client.secretName | default $t.peer.secretName | default $t.broker.secretName -}}
{{- else if or (eq .use "consumer") (eq .use "consumer-ca") -}}{{- $t.consumer.secretName -}}
{{- else if eq .use "etcd" -}}{{- .ctx.Values.etcd.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* The keys of one TLS use: the values block whose Secret is used (peer's keys for a defaulted peer...). */}}
{{- define "gazette.tlsKeys" -}}
{{- $t := .ctx.Values.security.tls -}}
{{- $block := dict -}}
{{- if eq .use "broker" -}}{{- $block = $t.broker -}}
{{- else if eq .use "peer" -}}{{- $block = ternary $t.peer $t.broker (ne $t.peer.secretName "") -}}
{{- else if eq .use "client" -}}{{- $block = ternary $t.client (ternary $t.peer $t.broker (ne $t.peer.secretName "")) (ne $t.client.secretName "") -}}
{{- else if or (eq .use "consumer") (eq .use "consumer-ca") -}}{{- $block = $t.consumer -}}
{{- else if eq .use "etcd" -}}{{- $block = .ctx.Values.etcd.tls -}}
{{- end -}}
{{- toJson $block -}}
{{- end -}}

{{/*
The TLS uses of a role. The operator's, while it checks Shards' lag (else it dials no
broker or consumer): "client", the certificate it presents to brokers and consumers;
"consumer-ca", the CA of consumers serving TLS (only that key of their Secret, never
their private key).
*/}}
{{- define "gazette.tlsUses" -}}
{{- $uses := list -}}
{{- $lag := and (eq .role "operator") (include "gazette.lagChecked" .ctx) -}}
{{- $c := .ctx.Values.security.tls.consumer -}}
{{- if include "gazette.tlsOn" .ctx -}}
{{- if eq .role "broker" -}}{{- $uses = list "broker" "peer" -}}
{{- else if or (eq .role "consumer") (eq .role "client") $lag -}}{{- $uses = list "client" -}}
{{- end -}}
{{- end -}}
{{- if and (eq .role "consumer") $c.secretName -}}{{- $uses = append $uses "consumer" -}}{{- end -}}
{{- if and $lag $c.secretName $c.caKey -}}{{- $uses = append $uses "consumer-ca" -}}{{- end -}}
{{- if and (ne .role "client") .ctx.Values.etcd.tls.secretName -}}{{- $uses = append $uses "etcd" -}}{{- end -}}
{{- toJson $uses -}}
{{- end -}}

{{/* The environment variables naming a use's files: (dict "use" "peer" "dir" ... "keys" ...). */}}
{{- define "gazette.tlsUseEnv" -}}
{{- $vars := dict
  "broker" (list "BROKER_SERVER_CERT_FILE" "BROKER_SERVER_CERT_KEY_FILE" "BROKER_SERVER_CA_FILE")
  "peer" (list "BROKER_PEER_CERT_FILE" "BROKER_PEER_CERT_KEY_FILE" "BROKER_PEER_CA_FILE")
  "client" (list "BROKER_CERT_FILE" "BROKER_CERT_KEY_FILE" "BROKER_TRUSTED_CA_FILE")
  "consumer" (list "CONSUMER_SERVER_CERT_FILE" "CONSUMER_SERVER_CERT_KEY_FILE" "CONSUMER_SERVER_CA_FILE")
  "consumer-ca" (list "" "" "CONSUMER_TRUSTED_CA_FILE")
  "etcd" (list "ETCD_CERT_FILE" "ETCD_CERT_KEY_FILE" "ETCD_TRUSTED_CA_FILE") -}}
{{- $names := get $vars .use -}}
{{- $files := list .keys.certKey .keys.keyKey .keys.caKey -}}
{{- range $i, $file := $files }}
{{- if and $file (index $names $i) }}
- name: {{ index $names $i }}
  value: {{ printf "%s/%s" $.dir $file | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The Secret of auth keys: the one named, else the chart's own (security.authKeys.generate), else none. */}}
{{- define "gazette.authKeysSecret" -}}
{{- $a := .Values.security.authKeys -}}
{{- if $a.secretName -}}
{{ $a.secretName }}
{{- else if $a.generate -}}
{{ include "gazette.fullname" . }}-auth-keys
{{- end -}}
{{- end -}}

{{/*
Whether a role gets the auth keys Secret as a mounted file (--broker.auth-keys-file):
brokers, which verify with it; and the operator while it checks Shards' lag, for which
it signs its own tokens, each READ of one journal for a minute (gazette.operator.lagauth;
values.yaml security.authKeys says why it holds the keys). (dict "ctx" $ "role" "operator")
*/}}
{{- define "gazette.authKeysMounted" -}}
{{- $ctx := .ctx -}}
{{- if include "gazette.authKeysSecret" $ctx -}}
{{- if or (eq .role "broker") (and (eq .role "operator") (include "gazette.lagChecked" $ctx)) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* Environment of a role's security: (dict "ctx" $ "role" "broker"). */}}
{{- define "gazette.securityEnv" -}}
{{- $ctx := .ctx -}}
{{- $s := $ctx.Values.security -}}
{{- $authSecret := include "gazette.authKeysSecret" $ctx }}
{{- if and $s.debugTokenRequired (not $authSecret) }}
{{- fail "security.debugTokenRequired needs authorization keys: security.authKeys.generate=true or security.authKeys.secretName" }}
{{- end }}
{{- if $authSecret }}
{{- if include "gazette.authKeysMounted" . }}
- name: BROKER_AUTH_KEYS_FILE
  value: {{ printf "/etc/gazette/auth/%s" $s.authKeys.key | quote }}
{{- end }}
{{- if eq .role "broker" }}
{{- if $s.debugTokenRequired }}
- name: BROKER_DEBUG_TOKEN_REQUIRED
  value: "true"
{{- end }}
{{- else if or (eq .role "consumer") (eq .role "client") }}
- name: BROKER_AUTH_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $authSecret }}
      key: {{ $s.authKeys.key }}
{{- end }}
{{- end }}
{{- $uses := include "gazette.tlsUses" . | fromJsonArray }}
{{- range $use := $uses }}
{{- include "gazette.tlsUseEnv" (dict "use" $use "dir" (printf "/etc/gazette/tls/%s" $use) "keys" (include "gazette.tlsKeys" (dict "ctx" $ctx "use" $use) | fromJson)) }}
{{- if and (eq $use "consumer-ca") (has "client" $uses) }}
{{- /* Consumers that ask for a client certificate get the one the chart's clients present (their own probes' too). */}}
{{- $client := include "gazette.tlsKeys" (dict "ctx" $ctx "use" "client") | fromJson }}
{{- with $client.certKey }}
- name: CONSUMER_CERT_FILE
  value: {{ printf "/etc/gazette/tls/client/%s" . | quote }}
- name: CONSUMER_CERT_KEY_FILE
  value: {{ printf "/etc/gazette/tls/client/%s" $client.keyKey | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if ne .role "client" }}
{{- if include "gazette.bundledEtcdAuth" $ctx }}
- name: ETCD_USERNAME
  value: {{ $ctx.Values.etcd.bundled.auth.username | quote }}
- name: ETCD_PASSWORD_FILE
  value: /etc/gazette/etcd/password/password
{{- else }}
{{- with $ctx.Values.etcd.username }}
- name: ETCD_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- if $ctx.Values.etcd.passwordSecret.name }}
- name: ETCD_PASSWORD_FILE
  value: {{ printf "/etc/gazette/etcd/password/%s" $ctx.Values.etcd.passwordSecret.key | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "gazette.securityVolumeMounts" -}}
{{- $ctx := .ctx -}}
{{- if include "gazette.authKeysMounted" . }}
# A directory, not a subPath: the kubelet updates it when the Secret changes.
- name: auth-keys
  mountPath: /etc/gazette/auth
  readOnly: true
{{- end }}
{{- range $use := include "gazette.tlsUses" . | fromJsonArray }}
- name: tls-{{ $use }}
  mountPath: /etc/gazette/tls/{{ $use }}
  readOnly: true
{{- end }}
{{- if and (ne .role "client") (or $ctx.Values.etcd.passwordSecret.name (include "gazette.bundledEtcdAuth" $ctx)) }}
- name: etcd-password
  mountPath: /etc/gazette/etcd/password
  readOnly: true
{{- end }}
{{- end -}}

{{- define "gazette.securityVolumes" -}}
{{- $ctx := .ctx -}}
{{- if include "gazette.authKeysMounted" . }}
- name: auth-keys
  secret:
    secretName: {{ include "gazette.authKeysSecret" $ctx }}
    defaultMode: 0440
{{- end }}
{{- range $use := include "gazette.tlsUses" . | fromJsonArray }}
- name: tls-{{ $use }}
  secret:
    secretName: {{ include "gazette.tlsSecret" (dict "ctx" $ctx "use" $use) }}
    defaultMode: 0440
    {{- if eq $use "consumer-ca" }}
    # The CA alone: the consumers' private key stays theirs.
    {{- $ca := (include "gazette.tlsKeys" (dict "ctx" $ctx "use" $use) | fromJson).caKey }}
    items:
      - {key: {{ $ca | quote }}, path: {{ $ca | quote }}}
    {{- end }}
{{- end }}
{{- if and (ne .role "client") (include "gazette.bundledEtcdAuth" $ctx) }}
- name: etcd-password
  secret:
    secretName: {{ include "gazette.etcdAuthSecret" $ctx }}
    defaultMode: 0440
    # The user's password only: root's stays with the setup Job.
    items:
      - {key: password, path: password}
{{- else if and (ne .role "client") $ctx.Values.etcd.passwordSecret.name }}
- name: etcd-password
  secret:
    secretName: {{ $ctx.Values.etcd.passwordSecret.name }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* http or https, for the brokers' addresses. */}}
{{- define "gazette.brokerScheme" -}}
{{- if include "gazette.tlsOn" . -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/*
The argv of an exec readiness probe over TLS: GET https://127.0.0.1:$port/debug/ready
presenting the certificate the environment names (if any). The server is the pod itself,
so its certificate is not verified here; the point is the answer.
(dict "cert" "BROKER_PEER_CERT_FILE" "key" "BROKER_PEER_CERT_KEY_FILE" "port" "BROKER_HTTP_PORT")
*/}}
{{- define "gazette.tlsProbe" -}}
- python
- -c
- |
  import os, ssl, urllib.request
  e = os.environ
  ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
  ctx.check_hostname = False
  ctx.verify_mode = ssl.CERT_NONE
  if e.get("{{ .cert }}"):
      ctx.load_cert_chain(e["{{ .cert }}"], e.get("{{ .key }}"))
  url = "https://127.0.0.1:%s/debug/ready" % e["{{ .port }}"]
  urllib.request.urlopen(url, context=ctx, timeout=3).close()
{{- end -}}
