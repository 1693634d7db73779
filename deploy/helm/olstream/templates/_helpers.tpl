{{/* Names and labels. */}}
{{- define "olstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "olstream.fullname" -}}
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

{{- define "olstream.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "olstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "worker") */}}
{{- define "olstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "olstream.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "olstream.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* One section of config as a dict (empty when absent). */}}
{{- define "olstream.section" -}}
{{- $cfg := .root.Values.config | default dict -}}
{{- toYaml (get $cfg .section | default dict) -}}
{{- end -}}

{{/* Topic and group names: the keys of config, else the commands' own defaults. */}}
{{- define "olstream.sourceTopic" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "source") | fromYaml -}}
{{- $s.topic | default "olstream.eventlog" -}}
{{- end -}}
{{- define "olstream.sourceErrorsTopic" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "source") | fromYaml -}}
{{- $s.errors_topic | default (printf "%s.errors" (include "olstream.sourceTopic" .)) -}}
{{- end -}}
{{/* The worker's app id: config.worker.app_id, else the CLI's default (olstream/streams/settings.py,
`olstream worker --app-id`), which the chart renders into the worker's and explain's sections. */}}
{{- define "olstream.appId" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "worker") | fromYaml -}}
{{- $s.app_id | default "olstream-stream" -}}
{{- end -}}
{{- define "olstream.inputTopic" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "worker") | fromYaml -}}
{{- $s.input_topic | default (include "olstream.sourceTopic" .) -}}
{{- end -}}
{{- define "olstream.outputTopic" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "worker") | fromYaml -}}
{{- $s.output_topic | default "openlineage.events" -}}
{{- end -}}
{{- define "olstream.workerErrorsTopic" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "worker") | fromYaml -}}
{{- $s.errors_topic | default "olstream.stream.errors" -}}
{{- end -}}
{{- define "olstream.sinkTopic" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "sink") | fromYaml -}}
{{- $s.topic | default (include "olstream.outputTopic" .) -}}
{{- end -}}
{{- define "olstream.sinkGroup" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "sink") | fromYaml -}}
{{- $s.group | default "olstream-sink" -}}
{{- end -}}
{{- define "olstream.dlqTopic" -}}
{{- $s := include "olstream.section" (dict "root" . "section" "sink") | fromYaml -}}
{{- $s.dlq_topic | default "openlineage.events.dlq" -}}
{{- end -}}

{{/* The metrics port of a component (0: none): (dict "root" $ "section" "worker") */}}
{{- define "olstream.metricsPort" -}}
{{- $s := include "olstream.section" . | fromYaml -}}
{{- int ($s.metrics_port | default 0) -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: stop_timeout (the commands' default 30 s) + the margin. */}}
{{- define "olstream.gracePeriod" -}}
{{- $s := include "olstream.section" . | fromYaml -}}
{{- $stop := $s.stop_timeout | default 30.0 | float64 -}}
{{- add (int (ceil $stop)) (int .root.Values.terminationGraceExtraSeconds) -}}
{{- end -}}

{{/* Kafka connection. */}}
{{- define "olstream.bootstrap" -}}
{{- if .Values.kafka.bootstrap -}}
{{- .Values.kafka.bootstrap -}}
{{- else if .Values.strimzi.enabled -}}
{{- printf "%s-kafka-bootstrap:9093" .Values.strimzi.cluster -}}
{{- else -}}
{{- fail "kafka.bootstrap is required (or strimzi.enabled with strimzi.cluster)" -}}
{{- end -}}
{{- end -}}

{{- define "olstream.tls" -}}
{{- if kindIs "invalid" .Values.kafka.tls -}}{{ .Values.strimzi.enabled }}{{- else -}}{{ .Values.kafka.tls }}{{- end -}}
{{- end -}}

{{- define "olstream.caSecretName" -}}
{{- if .Values.kafka.caSecret.name -}}
{{- .Values.kafka.caSecret.name -}}
{{- else if .Values.strimzi.enabled -}}
{{- printf "%s-cluster-ca-cert" .Values.strimzi.cluster -}}
{{- end -}}
{{- end -}}

{{- define "olstream.authentication" -}}
{{- $a := .Values.kafka.authentication | default "none" -}}
{{- if not (has $a (list "none" "scram-sha-512" "tls")) -}}
{{- fail (printf "kafka.authentication %q: one of none, scram-sha-512, tls" $a) -}}
{{- end -}}
{{- if and (eq $a "tls") (ne (include "olstream.tls" .) "true") -}}
{{- fail "kafka.authentication tls needs kafka.tls true" -}}
{{- end -}}
{{- $a -}}
{{- end -}}

{{/* A component's Kafka user name and the Secret of its credentials: (dict "root" $ "component" "sink") */}}
{{- define "olstream.kafkaUser" -}}
{{- $u := get .root.Values.kafka.users .component | default dict -}}
{{- $u.name | default (printf "%s-%s" (include "olstream.fullname" .root) .component) -}}
{{- end -}}
{{- define "olstream.kafkaUserSecret" -}}
{{- $u := get .root.Values.kafka.users .component | default dict -}}
{{- $u.secretName | default (include "olstream.kafkaUser" .) -}}
{{- end -}}

{{/* Mount paths (the config file names them). */}}
{{- define "olstream.configDir" -}}/etc/olstream/config{{- end -}}
{{- define "olstream.caDir" -}}/etc/olstream/kafka-ca{{- end -}}
{{- define "olstream.userDir" -}}/etc/olstream/kafka-user{{- end -}}

{{/* The Kafka settings the chart adds to a section: (dict "root" $ "component" "source") */}}
{{- define "olstream.kafkaSettings" -}}
{{- $root := .root -}}
{{- $auth := include "olstream.authentication" $root -}}
{{- $tls := eq (include "olstream.tls" $root) "true" -}}
{{- $out := dict -}}
{{- if and (not $tls) (eq $auth "scram-sha-512") -}}
{{- $_ := set $out "kafka_security_protocol" "SASL_PLAINTEXT" -}}
{{- else if eq $auth "scram-sha-512" -}}
{{- $_ := set $out "kafka_security_protocol" "SASL_SSL" -}}
{{- else if $tls -}}
{{- $_ := set $out "kafka_security_protocol" "SSL" -}}
{{- end -}}
{{- if eq $auth "scram-sha-512" -}}
{{- $_ := set $out "kafka_sasl_mechanism" "SCRAM-SHA-512" -}}
{{- $_ := set $out "kafka_sasl_username" (include "olstream.kafkaUser" .) -}}
{{- end -}}
{{- if and $tls (include "olstream.caSecretName" $root) -}}
{{- $_ := set $out "kafka_ssl_ca" (printf "%s/%s" (include "olstream.caDir" $root) $root.Values.kafka.caSecret.key) -}}
{{- end -}}
{{- if eq $auth "tls" -}}
{{- $_ := set $out "kafka_ssl_cert" (printf "%s/%s" (include "olstream.userDir" $root) $root.Values.kafka.certKey) -}}
{{- $_ := set $out "kafka_ssl_key" (printf "%s/%s" (include "olstream.userDir" $root) $root.Values.kafka.keyKey) -}}
{{- end -}}
{{- if $root.Values.kafka.properties -}}
{{- $_ := set $out "kafka_config" (printf "%s/kafka-client.properties" (include "olstream.configDir" $root)) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* A component's section of olstream.yml: the chart's derived keys and its Kafka settings, with
the section of config over them (config wins): (dict "root" $ "component" "worker") */}}
{{- define "olstream.componentSection" -}}
{{- $root := .root -}}
{{- $derived := dict -}}
{{- if eq .component "worker" -}}
{{- $derived = dict "input_topic" (include "olstream.inputTopic" $root) "app_id" (include "olstream.appId" $root) -}}
{{- else if eq .component "sink" -}}
{{- $derived = dict "topic" (include "olstream.sinkTopic" $root) -}}
{{- end -}}
{{- $kafka := include "olstream.kafkaSettings" . | fromYaml -}}
{{- $own := deepCopy (get ($root.Values.config | default dict) .component | default dict) -}}
{{- toYaml (mergeOverwrite (merge $derived $kafka) $own) -}}
{{- end -}}

{{/* The receivers' dead-letter topics, sorted by receiver: <dlq_topic>.<receiver> (olstream sink
--transport NAME adds the suffix). */}}
{{- define "olstream.dlqTopics" -}}
{{- $out := list -}}
{{- range $name := keys .Values.sink.receivers | sortAlpha -}}
{{- $out = append $out (printf "%s.%s" (include "olstream.dlqTopic" $) $name) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The error topics of the release, source to sink: what `olstream errors list --topic` is given. */}}
{{- define "olstream.errorTopics" -}}
{{- $out := list -}}
{{- if .Values.source.enabled -}}
{{- $out = append $out (include "olstream.sourceErrorsTopic" .) -}}
{{- end -}}
{{- $out = append $out (include "olstream.workerErrorsTopic" .) -}}
{{- $out = concat $out (include "olstream.dlqTopics" . | fromYamlArray) -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The topics of the release, source to sink: what `olstream status --topic` is given. */}}
{{- define "olstream.statusTopics" -}}
{{- $out := list -}}
{{- if .Values.source.enabled -}}
{{- $out = append $out (include "olstream.sourceTopic" .) -}}
{{- end -}}
{{- $out = append $out (include "olstream.inputTopic" .) -}}
{{- $out = concat $out (list (include "olstream.outputTopic" .) (include "olstream.sinkTopic" .)) -}}
{{- $out = concat $out (include "olstream.errorTopics" . | fromYamlArray) -}}
{{- toYaml (uniq $out) -}}
{{- end -}}

{{/* The section `explain:` (olstream explain reads it, olstream/operations/settings.py): the
release's topic names and app id; the first receiver's DLQ (--dlq-topic for another). */}}
{{- define "olstream.explainSection" -}}
{{- $wrk := include "olstream.componentSection" (dict "root" . "component" "worker") | fromYaml -}}
{{- $out := dict "records_topic" (include "olstream.inputTopic" .) "events_topic" (include "olstream.sinkTopic" .) "app_id" (include "olstream.appId" .) -}}
{{- with include "olstream.dlqTopics" . | fromYamlArray -}}
{{- $_ := set $out "dlq_topic" (join "," .) -}}
{{- end -}}
{{- /* the worker's registry: explain decodes confluent-framed records with it */ -}}
{{- range $key := list "schema_registry" "schema_registry_logical_cluster" "schema_registry_ca" "schema_registry_certificate" "schema_registry_key" -}}
{{- if hasKey $wrk $key -}}
{{- $_ := set $out $key (get $wrk $key) -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* olstream.yml: config with the chart's additions under each section (config wins). */}}
{{- define "olstream.configFile" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $_ := set $cfg "bootstrap" ($cfg.bootstrap | default (include "olstream.bootstrap" .)) -}}
{{- range $component := list "source" "worker" "sink" -}}
{{- $_ := set $cfg $component (include "olstream.componentSection" (dict "root" $ "component" $component) | fromYaml) -}}
{{- end -}}
{{- $explain := include "olstream.explainSection" . | fromYaml -}}
{{- $_ := set $cfg "explain" (mergeOverwrite $explain (deepCopy ($cfg.explain | default dict))) -}}
{{- $errors := dict "topics" (include "olstream.errorTopics" . | fromYamlArray | join ",") -}}
{{- $_ := set $cfg "errors" (mergeOverwrite $errors (deepCopy ($cfg.errors | default dict))) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The Kafka client settings of a component's section as environment variables, so that every
`olstream` command exec'd in its pod (status, errors, explain, replay: their file sections do not
hold them, and `errors` has none) connects and logs in as the component does; the variables hold
the values of the file, which the component itself reads: (dict "root" $ "component" "worker") */}}
{{- define "olstream.kafkaEnv" -}}
{{- $root := .root -}}
{{- $s := include "olstream.componentSection" (dict "root" $root "component" .component) | fromYaml -}}
- name: OLSTREAM_KAFKA_BOOTSTRAP
  value: {{ $s.bootstrap | default (($root.Values.config | default dict).bootstrap) | default (include "olstream.bootstrap" $root) | quote }}
{{- range $key := list "kafka_config" "kafka_security_protocol" "kafka_sasl_mechanism" "kafka_sasl_username" "kafka_ssl_ca" "kafka_ssl_cert" "kafka_ssl_key" "kafka_ssl_endpoint_identification" }}
{{- if hasKey $s $key }}
- name: OLSTREAM_{{ upper $key }}
  value: {{ get $s $key | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The volumes and mounts of the Kafka credentials and the config: (dict "root" $ "component" "worker") */}}
{{- define "olstream.kafkaVolumes" -}}
- name: config
  configMap:
    name: {{ include "olstream.fullname" .root }}
{{- if and (eq (include "olstream.tls" .root) "true") (include "olstream.caSecretName" .root) }}
- name: kafka-ca
  secret:
    secretName: {{ include "olstream.caSecretName" .root }}
    items:
      - key: {{ .root.Values.kafka.caSecret.key }}
        path: {{ .root.Values.kafka.caSecret.key }}
{{- end }}
{{- if eq (include "olstream.authentication" .root) "tls" }}
- name: kafka-user
  secret:
    secretName: {{ include "olstream.kafkaUserSecret" . }}
    items:
      - key: {{ .root.Values.kafka.certKey }}
        path: {{ .root.Values.kafka.certKey }}
      - key: {{ .root.Values.kafka.keyKey }}
        path: {{ .root.Values.kafka.keyKey }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "olstream.kafkaVolumeMounts" -}}
- name: config
  mountPath: {{ include "olstream.configDir" .root }}
  readOnly: true
{{- if and (eq (include "olstream.tls" .root) "true") (include "olstream.caSecretName" .root) }}
- name: kafka-ca
  mountPath: {{ include "olstream.caDir" .root }}
  readOnly: true
{{- end }}
{{- if eq (include "olstream.authentication" .root) "tls" }}
- name: kafka-user
  mountPath: {{ include "olstream.userDir" .root }}
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* The environment every component gets: (dict "root" $ "component" "worker") */}}
{{- define "olstream.commonEnv" -}}
- name: OLSTREAM_CONFIG
  value: {{ include "olstream.configDir" .root }}/olstream.yml
{{ include "olstream.kafkaEnv" . }}
{{- if eq (include "olstream.authentication" .root) "scram-sha-512" }}
- name: OLSTREAM_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "olstream.kafkaUserSecret" . }}
      key: {{ .root.Values.kafka.passwordKey }}
{{- end }}
{{- end -}}

{{/* The ports and probes of a component: (dict "root" $ "section" "worker") */}}
{{- define "olstream.portsAndProbes" -}}
{{- $port := int (include "olstream.metricsPort" .) -}}
{{- if gt $port 0 }}
ports:
  - name: metrics
    containerPort: {{ $port }}
    protocol: TCP
startupProbe:
  httpGet: {path: /healthz, port: metrics}
  {{- toYaml .root.Values.probes.startup | nindent 2 }}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  {{- toYaml .root.Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /healthz, port: metrics}
  {{- toYaml .root.Values.probes.readiness | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "olstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "olstream.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Pod-level settings of a component: (dict "root" $ "values" .Values.worker "component" "worker");
a topology spread constraint without a labelSelector gets the component's pods. */}}
{{- define "olstream.podSettings" -}}
{{- $selector := include "olstream.selectorLabels" (dict "root" .root "component" .component) | fromYaml -}}
serviceAccountName: {{ include "olstream.serviceAccountName" .root }}
automountServiceAccountToken: {{ .root.Values.serviceAccount.automountToken }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $c := deepCopy . }}
{{- if not $c.labelSelector }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
  - {{- toYaml $c | nindent 4 }}
{{- end }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A Kubernetes name from a topic name (KafkaTopic): lower case, '.' and '_' as '-'. */}}
{{- define "olstream.topicResourceName" -}}
{{- printf "%s-%s" (include "olstream.fullname" .root) (.topic | lower | replace "_" "-" | replace "." "-") | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Every topic the pipeline uses, as a YAML list of {topic, partitions, replicas, config}:
the KafkaTopics, and the topic ACLs name the same ones. */}}
{{- define "olstream.topics" -}}
{{- $src := include "olstream.section" (dict "root" . "section" "source") | fromYaml -}}
{{- $wrk := include "olstream.section" (dict "root" . "section" "worker") | fromYaml -}}
{{- $snk := include "olstream.section" (dict "root" . "section" "sink") | fromYaml -}}
{{- $headroom := 65536 -}}
{{- $recordBytes := add (int ($src.max_record_bytes | default 1048576)) $headroom | toString -}}
{{- $eventBytes := add (int ($wrk.max_event_bytes | default 1048576)) $headroom | toString -}}
{{- /* a sink's DLQ takes any event of its topic plus the dead-letter headers (connectors/sink/run.py) */ -}}
{{- $deadLetterBytes := add (int $eventBytes) $headroom | toString -}}
{{- $out := list -}}
{{- $srcReplicas := int ($src.replication_factor | default .Values.strimzi.topics.replicas) -}}
{{- $wrkReplicas := int ($wrk.replication_factor | default .Values.strimzi.topics.replicas) -}}
{{- $snkReplicas := int ($snk.replication_factor | default .Values.strimzi.topics.replicas) -}}
{{- $srcIsr := int ($src.min_insync_replicas | default (max 1 (sub $srcReplicas 1))) | toString -}}
{{- $wrkIsr := int ($wrk.min_insync_replicas | default (max 1 (sub $wrkReplicas 1))) | toString -}}
{{- $snkIsr := int ($snk.min_insync_replicas | default (max 1 (sub $snkReplicas 1))) | toString -}}
{{- $records := include "olstream.sourceTopic" . -}}
{{- if not $src.partitions -}}
{{- fail "config.source.partitions is required with strimzi.topics (the source's default, the log's partition count, is not known here)" -}}
{{- end -}}
{{- $inputPartitions := int $src.partitions -}}
{{- if .Values.source.enabled -}}
{{- $out = append $out (dict "topic" $records "partitions" $inputPartitions "replicas" $srcReplicas "config" (dict "max.message.bytes" $recordBytes "min.insync.replicas" $srcIsr)) -}}
{{- $out = append $out (dict "topic" (include "olstream.sourceErrorsTopic" .) "partitions" $inputPartitions "replicas" $srcReplicas "config" (dict "max.message.bytes" $recordBytes "min.insync.replicas" $srcIsr)) -}}
{{- $out = append $out (dict "topic" (printf "%s.offsets" $records) "partitions" 1 "replicas" $srcReplicas "config" (dict "cleanup.policy" "compact" "min.insync.replicas" $srcIsr "max.message.bytes" "1048588")) -}}
{{- end -}}
{{- $input := include "olstream.inputTopic" . -}}
{{- if or (ne $input $records) (not .Values.source.enabled) -}}
{{- $inputPartitions = int ($wrk.partitions | default 6) -}}
{{- $out = append $out (dict "topic" $input "partitions" $inputPartitions "replicas" $wrkReplicas "config" (dict "max.message.bytes" $eventBytes "min.insync.replicas" $wrkIsr)) -}}
{{- end -}}
{{- $appId := include "olstream.appId" . -}}
{{- $out = append $out (dict "topic" (printf "%s-runs-changelog" $appId) "partitions" $inputPartitions "replicas" $wrkReplicas "config" (dict "cleanup.policy" "compact" "max.message.bytes" $eventBytes "min.insync.replicas" $wrkIsr)) -}}
{{- $out = append $out (dict "topic" (printf "%s-__assignor-__leader" $appId) "partitions" 1 "replicas" $wrkReplicas "config" (dict "max.message.bytes" "1048588" "min.insync.replicas" $wrkIsr)) -}}
{{- $outputPartitions := int ($wrk.output_partitions | default 6) -}}
{{- $out = append $out (dict "topic" (include "olstream.outputTopic" .) "partitions" $outputPartitions "replicas" $wrkReplicas "config" (dict "max.message.bytes" $eventBytes "min.insync.replicas" $wrkIsr)) -}}
{{- $out = append $out (dict "topic" (include "olstream.workerErrorsTopic" .) "partitions" 1 "replicas" $wrkReplicas "config" (dict "max.message.bytes" $eventBytes "min.insync.replicas" $wrkIsr)) -}}
{{- range $name, $r := .Values.sink.receivers -}}
{{- $out = append $out (dict "topic" (printf "%s.%s" (include "olstream.dlqTopic" $) $name) "partitions" $outputPartitions "replicas" $snkReplicas "config" (dict "max.message.bytes" $deadLetterBytes "min.insync.replicas" $snkIsr)) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The ACLs of a component's KafkaUser: (dict "root" $ "component" "worker") */}}
{{- define "olstream.acls" -}}
{{- $root := .root -}}
{{- $create := not (and $root.Values.strimzi.topics.enabled) -}}
{{- $acls := list -}}
{{- if eq .component "source" -}}
{{- $src := include "olstream.section" (dict "root" $root "section" "source") | fromYaml -}}
{{- $records := include "olstream.sourceTopic" $root -}}
{{- $ops := list "Read" "Write" "Describe" "DescribeConfigs" -}}
{{- if $create }}{{ $ops = append $ops "Create" }}{{ end -}}
{{- range $t := list $records (include "olstream.sourceErrorsTopic" $root) (printf "%s.offsets" $records) -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" $t "patternType" "literal") "operations" $ops) -}}
{{- end -}}
{{- /* the consumer that reads the topics' tails at start: its own group id, never joined */ -}}
{{- $acls = append $acls (dict "resource" (dict "type" "group" "name" "olstream-source-resume-" "patternType" "prefix") "operations" (list "Read")) -}}
{{- if $src.exactly_once -}}
{{- /* connectors/source/settings.py: olstream-source-{topic}-{digest of topic and log URL} */ -}}
{{- $acls = append $acls (dict "resource" (dict "type" "transactionalId" "name" (printf "olstream-source-%s-" $records) "patternType" "prefix") "operations" (list "Write" "Describe")) -}}
{{- end -}}
{{- else if eq .component "worker" -}}
{{- $wrk := include "olstream.section" (dict "root" $root "section" "worker") | fromYaml -}}
{{- $appId := include "olstream.appId" $root -}}
{{- $in := list "Read" "Describe" "DescribeConfigs" -}}
{{- $write := list "Write" "Describe" "DescribeConfigs" -}}
{{- if $create }}{{ $in = append $in "Create" }}{{ $write = append $write "Create" }}{{ end -}}
{{- $changelog := list "Read" "Write" "Describe" "DescribeConfigs" "Alter" -}}
{{- if $create }}{{ $changelog = append $changelog "Create" }}{{ end -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" (include "olstream.inputTopic" $root) "patternType" "literal") "operations" $in) -}}
{{- /* the run states; grown with the input's partitions (CreatePartitions: Alter) */ -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" (printf "%s-runs-changelog" $appId) "patternType" "literal") "operations" $changelog) -}}
{{- /* faust's leader topic: faust declares it at every start (CreateTopics unless its metadata shows it) */ -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" (printf "%s-__assignor-__leader" $appId) "patternType" "literal") "operations" (list "Read" "Write" "Describe" "DescribeConfigs" "Create")) -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" (include "olstream.outputTopic" $root) "patternType" "literal") "operations" $write) -}}
{{- /* Read: `olstream errors list|show` exec'd in a worker's pod reads its errors topic */ -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" (include "olstream.workerErrorsTopic" $root) "patternType" "literal") "operations" (prepend $write "Read")) -}}
{{- /* the group {app_id}, and the assigned-only readers {app_id}.restore and {app_id}.directory */ -}}
{{- $acls = append $acls (dict "resource" (dict "type" "group" "name" $appId "patternType" "prefix") "operations" (list "Read" "Describe")) -}}
{{- if ne ($wrk.processing_guarantee | default "exactly_once") "at_least_once" -}}
{{- /* streams/runtime/transactions.py: {app_id}-{input topic}-{partition} */ -}}
{{- $acls = append $acls (dict "resource" (dict "type" "transactionalId" "name" (printf "%s-" $appId) "patternType" "prefix") "operations" (list "Write" "Describe")) -}}
{{- end -}}
{{- else -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" (include "olstream.sinkTopic" $root) "patternType" "literal") "operations" (list "Read" "Describe")) -}}
{{- /* Read: `olstream errors list|show` exec'd in a sink's pod reads its DLQ */ -}}
{{- $dlqOps := list "Read" "Write" "Describe" "DescribeConfigs" -}}
{{- if $create }}{{ $dlqOps = append $dlqOps "Create" }}{{ end -}}
{{- range $name, $r := $root.Values.sink.receivers -}}
{{- $acls = append $acls (dict "resource" (dict "type" "topic" "name" (printf "%s.%s" (include "olstream.dlqTopic" $root) $name) "patternType" "literal") "operations" $dlqOps) -}}
{{- $acls = append $acls (dict "resource" (dict "type" "group" "name" (printf "%s.%s" (include "olstream.sinkGroup" $root) $name) "patternType" "literal") "operations" (list "Read" "Describe")) -}}
{{- end -}}
{{- end -}}
{{- toYaml $acls -}}
{{- end -}}
