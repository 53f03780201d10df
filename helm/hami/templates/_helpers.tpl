{{/* ---------------------------------------------------------------------------------------
Names and labels
--------------------------------------------------------------------------------------- */}}

{{- define "hami.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami.fullname" -}}
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

{{- define "hami.scheduler" -}}
{{- printf "%s-scheduler" (include "hami.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami.devicePlugin" -}}
{{- printf "%s-device-plugin" (include "hami.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami.webhookConfiguration" -}}
{{- printf "%s-webhook" (include "hami.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami.admissionPolicy" -}}
{{- printf "%s-scheduling-state" (include "hami.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami.tlsSecret" -}}
{{- default (printf "%s-tls" (include "hami.scheduler" .)) .Values.certs.secretName }}
{{- end }}

{{- define "hami.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "hami.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hami-py
{{- end }}

{{/* Selector labels of one component: include "hami.selectorLabels" (list . "scheduler").
The component label is hami-<component>, as HAMi's chart names its own (Lab 14 selects the
device plugin's pods with app.kubernetes.io/component=hami-device-plugin). */}}
{{- define "hami.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "hami.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: hami-{{ index . 1 }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Images
--------------------------------------------------------------------------------------- */}}

{{- define "hami.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* kube-scheduler matching the cluster: v1.35.7-gke.1150000 -> v1.35.7 */}}
{{- define "hami.kubeSchedulerImage" -}}
{{- $img := .Values.scheduler.kubeScheduler.image }}
{{- $tag := $img.tag }}
{{- if not $tag }}
{{- $tag = regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version }}
{{- $tag = printf "v%s" (trimPrefix "v" $tag) }}
{{- end }}
{{- printf "%s/%s:%s" $img.registry $img.repository $tag }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Preset resolution: an explicit value wins, "" / null takes the preset's.
--------------------------------------------------------------------------------------- */}}

{{- define "hami.gke" -}}
{{- if eq .Values.preset "gke" }}true{{ end }}
{{- end }}

{{- define "hami.devicePlugin.enabled" -}}
{{- $v := .Values.devicePlugin.enabled }}
{{- if .Values.migration.hamiNamespace }}{{/* HAMi's plugin runs: never a second one */}}
{{- else if kindIs "bool" $v }}{{ if $v }}true{{ end }}
{{- else if include "hami.gke" . }}true
{{- else if and (not (include "hami.standalone" .)) (include "hami.devicePlugin.configured" .) }}true
{{- end }}
{{- end }}

{{/* Any of HAMi's chart's values for its plugin set (Lab 14, Step 3): HAMi runs the plugin then. */}}
{{- define "hami.devicePlugin.configured" -}}
{{- $dp := .Values.devicePlugin }}
{{- if or .Values.global.gpuHookPath $dp.nvidiaDriverRoot $dp.libPath $dp.monitor.ctrPath $dp.extraEnvs }}true{{ end }}
{{- end }}

{{- define "hami.monitor.enabled" -}}
{{- $v := .Values.devicePlugin.monitor.enabled }}
{{- if kindIs "bool" $v }}{{ if $v }}true{{ end }}{{ else if not (include "hami.gke" .) }}true{{ end }}
{{- end }}

{{- define "hami.driverRoot" -}}
{{- .Values.devicePlugin.nvidiaDriverRoot | default (ternary "/home/kubernetes/bin/nvidia" "/" (eq .Values.preset "gke")) }}
{{- end }}

{{- define "hami.hookPath" -}}
{{- .Values.global.gpuHookPath | default (ternary "/home/kubernetes/bin/nvidia" "/usr/local" (eq .Values.preset "gke")) }}
{{- end }}

{{- define "hami.libPath" -}}
{{- .Values.devicePlugin.libPath | default (printf "%s/vgpu" (include "hami.hookPath" .)) }}
{{- end }}

{{- define "hami.ctrPath" -}}
{{- .Values.devicePlugin.monitor.ctrPath | default (printf "%s/containers" (include "hami.libPath" .)) }}
{{- end }}

{{- define "hami.driverProfile" -}}
{{- .Values.webhook.driverProfile | default (ternary "gke" "" (eq .Values.preset "gke")) }}
{{- end }}

{{/* Environment the preset adds to a device-plugin container, unless extraEnvs names it. */}}
{{- define "hami.presetEnv" -}}
{{- $root := index . 0 }}
{{- $extra := index . 1 }}
{{- $names := list }}
{{- range $extra }}{{ $names = append $names .name }}{{ end }}
{{- if and (include "hami.gke" $root) (not (has "LD_LIBRARY_PATH" $names)) }}
- name: LD_LIBRARY_PATH
  value: /driver-root/lib64
{{- end }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Certificates and the webhook
--------------------------------------------------------------------------------------- */}}

{{- define "hami.bootstrap" -}}
{{- if not .Values.certs.certManager.enabled }}true{{ end }}
{{- end }}

{{- define "hami.standalone" -}}
{{- if eq .Values.webhook.injection.mode "standalone" }}true{{ end }}
{{- end }}

{{/* The other device families' resources (families.yaml, the registry's list), then any
     other name HAMi's chart values list under devices.<family>.customresources, then the
     names the device-config override gives them (every resource*Name key of a family's
     section, of each entry of iluvatars and of vnpus.configs; NVIDIA's are fixed). As in
     HAMi's chart, a gated family's (Ascend, Iluvatar) only where devices.<family>.enabled. */}}
{{- define "hami.familyResources" -}}
{{- $families := .Files.Get "families.yaml" | fromYaml }}
{{- $names := $families.resources | default list -}}
{{- $off := dict }}
{{- range $family, $g := $families.gated }}
{{- if dig $family "enabled" false $.Values.devices }}
{{- $names = concat $names $g.resources }}
{{- else }}
{{- $_ := set $off $family true }}{{ $_ = set $off $g.section true }}
{{- end }}
{{- end }}
{{- range $family, $v := .Values.devices }}
{{- if and (kindIs "map" $v) (not (hasKey $off $family)) }}
{{- $names = concat $names ($v.customresources | default list) -}}
{{- end }}
{{- end }}
{{- $content := (index .Values "device-config").content }}
{{- range $section, $v := ($content | default "" | fromYaml) }}
{{- if hasKey $off $section }}{{ $v = dict }}{{ end }}
{{- $entries := list }}
{{- if kindIs "map" $v }}{{ $entries = prepend ($v.configs | default list) $v }}{{ end }}
{{- if kindIs "slice" $v }}{{ $entries = $v }}{{ end }}
{{- range (ne $section "nvidia" | ternary $entries list) }}
{{- range $key, $name := ((kindIs "map" .) | ternary . dict) }}
{{- if and (regexMatch "^resource.*Name" $key) (kindIs "string" $name) $name }}{{ $names = append $names $name }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (uniq $names) -}}
{{- end }}

{{/* CEL: does container c request or limit any GPU resource, of NVIDIA or another family? */}}
{{- define "hami.celContainerWantsGpu" -}}
{{- $names := concat (list "nvidia.com/gpu" "nvidia.com/gpumem" "nvidia.com/gpumem-percentage" "nvidia.com/gpucores") (include "hami.familyResources" . | fromJsonArray) -}}
{{- $quoted := list -}}
{{- range $names }}{{ $quoted = append $quoted (printf "'%s'" .) }}{{ end -}}
{{- $r := printf "[%s]" (join ", " $quoted) -}}
has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k in {{ $r }})) || (has(c.resources.requests) && c.resources.requests.exists(k, k in {{ $r }})))
{{- end }}

{{/* Namespaces never sent to the webhook (a JSON list): the webhook's selector and NOTES. */}}
{{- define "hami.webhook.excludedNamespaces" -}}
{{- toJson (uniq (concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces)) -}}
{{- end }}

{{/* Where the Lease lives: HAMi's release namespace beside HAMi (migration), else ours. */}}
{{- /* "true" or "false": scheduler.draBookkeeping, where "auto" asks the cluster Helm installs
into whether it serves resource.k8s.io/v1 (Kubernetes 1.34 and later), so one value suits
every cluster the chart supports and an older one is not left with a scheduler that never
becomes ready. The kind, not the group version: Helm's offline list (helm template without
--api-versions) names resource.k8s.io/v1 whatever the cluster, discovery names its kinds. */ -}}
{{- define "hami.draBookkeeping" -}}
{{- $v := .Values.scheduler.draBookkeeping -}}
{{- if eq (toString $v) "auto" -}}
{{- .Capabilities.APIVersions.Has "resource.k8s.io/v1/ResourceSlice" -}}
{{- else -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{- define "hami.leaseNamespace" -}}
{{- default .Release.Namespace .Values.migration.hamiNamespace }}
{{- end }}

{{/* hami serve's startupProbe failureThreshold at a 2 s period: values scheduler.startup's
budget, baseSeconds plus secondsPer10kPods for each started 10,000 of expectedPods. */}}
{{- define "hami.startupFailureThreshold" -}}
{{- $st := .Values.scheduler.startup -}}
{{- $tens := div (add (int64 $st.expectedPods) 9999) 10000 -}}
{{- $budget := add (int64 $st.baseSeconds) (mul (int64 $st.secondsPer10kPods) $tens) -}}
{{- div (add $budget 1) 2 -}}
{{- end }}

{{/* HAMi's release's name prefix, by its chart's rule (its chart is named hami too). */}}
{{- define "hami.hamiFullname" -}}
{{- $r := .Values.migration.hamiRelease }}
{{- ternary $r (printf "%s-hami" $r) (contains "hami" $r) | trunc 63 | trimSuffix "-" }}
{{- end }}
