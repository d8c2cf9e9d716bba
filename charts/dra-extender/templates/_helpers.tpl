{{/* The extender's image. */}}
{{- define "dra-extender.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* kube-scheduler's image. */}}
{{- define "dra-extender.schedulerImage" -}}
{{ .Values.kubeScheduler.image.repository }}:{{ .Values.kubeScheduler.image.tag }}
{{- end }}

{{/* The extender's --kubernetes-version: kube-scheduler's minor release, so both use the same
feature-gate defaults. */}}
{{- define "dra-extender.kubernetesVersion" -}}
{{- if .Values.kubeScheduler.kubernetesVersion -}}
{{ .Values.kubeScheduler.kubernetesVersion }}
{{- else -}}
{{- $minor := regexFind "^v?[0-9]+\\.[0-9]+" .Values.kubeScheduler.image.tag | trimPrefix "v" -}}
{{- if not $minor -}}
{{- fail (printf "kubeScheduler.image.tag %q does not start with vMAJOR.MINOR: set kubeScheduler.kubernetesVersion" .Values.kubeScheduler.image.tag) -}}
{{- end -}}
{{ $minor }}
{{- end -}}
{{- end }}

{{/* --feature-gates=A=true,B=false for both containers, or nothing. */}}
{{- define "dra-extender.featureGates" -}}
{{- $gates := list -}}
{{- range $name, $on := .Values.featureGates -}}
{{- $gates = append $gates (printf "%s=%t" $name $on) -}}
{{- end -}}
{{- if $gates -}}
--feature-gates={{ join "," $gates }}
{{- end -}}
{{- end }}

{{/* The labels every pod of the Deployment has, and every selector selects by. */}}
{{- define "dra-extender.selectorLabels" -}}
app.kubernetes.io/name: dra-extender
{{- end }}

{{/* kube-scheduler's KubeSchedulerConfiguration: one file, config.yaml. */}}
{{- define "dra-extender.schedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceName: dra-extender-scheduler
  resourceNamespace: {{ .Release.Namespace }}
profiles:
- schedulerName: {{ .Values.schedulerName }}
  plugins:
    multiPoint:
      disabled:
      # The extender allocates claims; the in-tree plugin would allocate them a second time.
      - name: DynamicResources
extenders:
{{- if .Values.tls.enabled }}
# The extender container of the same pod, over HTTPS with client certificates: the
# extender's serving certificate names {{ .Values.tls.serverName }}, and it lets in kube-scheduler's own,
# named {{ .Values.tls.clientName }}.
- urlPrefix: https://127.0.0.1:8888
  tlsConfig:
    serverName: {{ .Values.tls.serverName }}
    caFile: /etc/kubernetes/dra-extender-client/ca.crt
    certFile: /etc/kubernetes/dra-extender-client/tls.crt
    keyFile: /etc/kubernetes/dra-extender-client/tls.key
{{- else }}
# The extender container of the same pod (deployment.yaml); nothing else can reach it.
- urlPrefix: http://127.0.0.1:8888
{{- end }}
  filterVerb: filter
  prioritizeVerb: prioritize
  # Names the pods whose devices a preemptor needs; kube-scheduler needs kubernetes PR 135486
  # to ask for candidates where it finds no victims itself (docs/scheduling-policy.md).
  preemptVerb: preempt
  bindVerb: bind
  # Enough to outweigh the in-tree scores (score x weight x 10 is added to the node's total).
  weight: 5
  # The extender watches nodes itself: only node names travel.
  nodeCacheCapable: true
  # Filter answers within its own 4 s budget; bind writes claims and the Binding, which may
  # need conflict retries.
  httpTimeout: 10s
  ignorable: false
  # managedResources stays unset: pods with only resourceClaims must still reach the extender.
{{ end }}
