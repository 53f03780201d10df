"""What each setting of `hami serve` means: the text `--help` shows beside each flag (the
flag's default and environment variable are added by hami.runtime.config)."""

from hami.engine import nvidianames as nv
from hami.engine.gfd import COUNT_LABEL
from hami.engine.policy import GPU_POLICY_NAMES, NODE_POLICY_NAMES

HELP = {
    "kubeconfig": "kubeconfig file; in-cluster credentials when empty",
    "bind_address": "address of the HTTPS listener for /webhook, /healthz and /readyz",
    "port": "HTTPS port for /webhook, /healthz and /readyz",
    "extender_bind_address": (
        "loopback address of the plain HTTP listener for kube-scheduler's /filter and /bind "
        "(whoever reaches them can reserve cards, so nothing else may)"
    ),
    "extender_port": "port of /filter and /bind (and /healthz, /readyz)",
    "metrics_bind_address": "address of /metrics (the chart sets the pod IP)",
    "metrics_tls": "serve /metrics over HTTPS with the webhook's certificate",
    "metrics_pod_labels": (
        "publish the per-container series, which name every GPU pod's namespace and pod"
    ),
    "metrics_pod_series_limit": (
        "leave the per-container and per-pod series out of a scrape while more GPU pods than "
        "this are counted (at 150,000 pods they would be 60 MB a scrape); 0: no limit"
    ),
    "read_timeout_seconds": (
        "deadline for a new connection's TLS handshake and first request headers (from the "
        "accept), a later request's headers (from their first byte) and every body"
    ),
    "keepalive_timeout_seconds": (
        "how long a connection that has sent a request is kept open idle for the next; longer "
        "than the 90 s Go's HTTP clients keep idle connections (kube-apiserver's webhook "
        "client, kube-scheduler's extender client), so that they close them, not us: a "
        "POST sent on a connection the server is closing fails without a retry"
    ),
    "max_connections": (
        "open connections per listener at most (lowered to what the open-file limit holds); "
        "over it a new connection replaces the oldest that has sent no request, else the "
        'longest idle one. About 44 KiB each over TLS (docs/trust-boundary.md, "Bounded work")'
    ),
    "request_body_budget_mib": (
        "request bodies held in memory at once, all listeners together, in MiB (each body "
        "counts its Content-Length from before it is read until it is answered); a body with no "
        "room waits 2 s, then gets a 503 with Retry-After (0: an eighth of --memory-limit-mib, "
        'else 64; docs/trust-boundary.md, "Bounded work")'
    ),
    "memory_limit_mib": (
        "this container's memory limit in MiB (the chart passes it through the Downward API): "
        "sizes the request-body budget when --request-body-budget-mib is 0 (0: not known)"
    ),
    "tls_cert_file": "serving certificate (PEM); reloaded when the file changes",
    "tls_key_file": "serving key (PEM)",
    "metrics_port": "port of Prometheus /metrics (plain HTTP unless --metrics-tls)",
    "scheduler_name": "schedulerName the webhook sets and the extender serves",
    "gpu_scheduler_policy": f"default card policy: {', '.join(GPU_POLICY_NAMES)} or a chain",
    "node_scheduler_policy": f"default node policy: {' or '.join(NODE_POLICY_NAMES)}",
    "force_overwrite_default_scheduler": "take GPU pods that name default-scheduler",
    "overwrite_env": (
        "write NVIDIA_VISIBLE_DEVICES=none into the containers of a GPU pod that ask for no GPU "
        "(HAMi's overwriteEnv), so that neither their image nor an envFrom can name cards"
    ),
    "default_memory": f"MiB given to a container that asks for {nv.GPU} only (0: whole card)",
    "default_cores": f"percent of SMs given when {nv.GPUCORES} is absent",
    "default_gpu_num": f"{nv.GPU} set on containers that ask for memory or cores only",
    "memory_factor": f"multiplier applied to {nv.GPUMEM}",
    "node_lock_expiry_seconds": "age after which another pod's node lock is taken over",
    "node_lock_wait_seconds": "how long a bind waits for another pod's node lock before failing (0: not at all)",
    "reservation_ttl_seconds": "how long a filter decision waits for its bind",
    "admission_policy_binding": (
        "the chart's ValidatingAdmissionPolicyBinding that lets only the scheduler and the "
        "device plugin write scheduling state; hami serve will not start without it"
    ),
    "allow_without_admission_policy": (
        "start even though that binding is missing (Kubernetes before 1.30, or the chart's "
        "admissionPolicy.enabled=false): a tenant who edits a running pod's allocation "
        "annotations then gets its cards handed out again after the next restart"
    ),
    "pair_healthz_url": (
        "the /healthz of the kube-scheduler beside this process (the chart sets "
        "https://127.0.0.1:10259/healthz): /healthz/pair answers ok only while it does, and is "
        "that kube-scheduler's liveness probe, so a hung hami serve also restarts the "
        "kube-scheduler holding the Lease and the other replica takes over (empty: this "
        "process alone)"
    ),
    "watch_timeout_seconds": (
        "how long one watch of pods, nodes or quotas runs before it is renewed; the API server "
        "sends a bookmark just before it ends, so each watch is in touch at least this often, "
        "and one silent for 1.5 times as long (plus the 5 s reconnect cap) makes filter and "
        "bind refuse and /readyz fail"
    ),
    "watch_lag_limit_seconds": (
        "filter and bind refuse, and /readyz fails, while a pod this process bound has waited "
        "longer than this for the pods watch to show it (the watch is stalled or far behind)"
    ),
    "blind_give_up_seconds": (
        "a process blind (a watch silent or lagging past its bound) this long without a break "
        "fails /healthz and /healthz/pair, so the kubelet restarts it and the kube-scheduler "
        "beside it, and the other replica takes the Lease; it says why in one log line and an "
        "Event (0: never; long enough for a watch to reconnect and the pods to be listed again)"
    ),
    "events_per_second": (
        "Kubernetes Events posted a second at most (FilteringFailed, BindingFailed, ...); "
        "the rest are dropped and counted in hami_events_dropped (0: post none)"
    ),
    "success_events": (
        "post HAMi's FilteringSucceed and BindingSucceed Events for every placed pod: two "
        "writes per GPU pod that say what kube-scheduler's Scheduled Event and the pod's "
        "allocation annotations already say"
    ),
    "requeue_rate": (
        "pods a second at most that are touched (annotation hami.io/requeue) so kube-scheduler "
        "retries them once capacity they were refused for frees up (0: never)"
    ),
    "preemption": (
        "let a GPU pod that fits nowhere evict lower-priority GPU pods (Eviction API, so "
        "PodDisruptionBudgets hold) and take their cards; off: HAMi's behaviour"
    ),
    "preemption_hold_seconds": (
        "how long the cards a preemption frees stay held for the preemptor beyond the "
        "victims' termination grace period"
    ),
    "leader_elect": "follow the kube-scheduler Lease; only its holder serves filter and bind",
    "identity": "this replica's name in the Lease",
    "pod_namespace": "this replica's namespace ($POD_NAMESPACE): where its own Events go",
    "logging_format": "text (klog's, as Kubernetes components log) or json",
    "log_level": "debug, info, warning or error",
    "v": (
        "klog's verbosity for the lines HAMi logs verbosely: from 2, every card score of the "
        "chosen node as HAMi words it (`device <uuid> computer score is <score>`) at info; "
        "below, they are debug lines and each decision logs one info line with the scores"
    ),
    "kube_timeout_seconds": "deadline of one API server call",
    "extender_http_timeout": (
        "kube-scheduler's extender httpTimeout as its configuration writes it (a Go duration; "
        "the chart passes scheduler.kubeScheduler.httpTimeout): every bind answers before it"
    ),
    "bind_write_timeout_seconds": (
        "how long one write of a bind (node lock, Binding) may take; a replica that has just "
        "become the leader waits this long before serving, for the last writes of the previous "
        "leader to land"
    ),
    "api_write_limit": (
        "API writes in flight at most; more wait their turn, Bindings first, then the node "
        "lock, then Events and the rest"
    ),
    "leader_elect_resource_name": "the kube-scheduler Lease followed with --leader-elect",
    "leader_elect_resource_namespace": "namespace of that Lease",
    "shutdown_grace_seconds": "on SIGTERM, how long binds under way may take to finish",
    "cert_bootstrap_secret": (
        "Secret keeping a CA and serving pair this process creates and rotates itself "
        "(empty: use --tls-cert-file and --tls-key-file as given)"
    ),
    "cert_dir": "folder the bootstrapped tls.crt, tls.key and ca.crt are written to and served from",
    "webhook_configuration_name": (
        "MutatingWebhookConfiguration whose caBundle the certificate bootstrap keeps current"
    ),
    "service_name": "Service in front of the webhook: the serving certificate's DNS names",
    "service_namespace": "namespace of that Service and of the certificate Secret",
    "node_integration": "hami-device-plugin (its Allocate injects libvgpu and limits) or standalone (we do)",
    "driver_profile": "driver libraries to mount into GPU containers: gke, generic or none",
    "driver_host_lib": "generic profile: the host folder holding libcuda.so.1",
    "driver_container_lib": "generic profile: where that folder appears in containers (added to LD_LIBRARY_PATH)",
    "legacy_metrics": "publish HAMi's metric names from before v2.9 (GPUDeviceMemoryAllocated, ...)",
    "hook_path": "standalone: host folder with libvgpu.so (GKE: /home/kubernetes/bin/nvidia/vgpu)",
    "device_config_file": (
        "HAMi's device-config.yaml (its chart's hami-scheduler-device ConfigMap), read as HAMi "
        "reads it: each device family's resource names and settings (NVIDIA's names are "
        "fixed; none: the chart's defaults)"
    ),
    "gpu_core_policy": (
        "HAMi's device config nvidia.gpuCorePolicy (default, force or disable): any but default "
        "is set as GPU_CORE_UTILIZATION_POLICY in the containers given NVIDIA cards (with "
        "--device-config-file, the file's, which must not say otherwise)"
    ),
    "dra_gpu_device_classes": (
        "comma-separated DeviceClasses whose DRA claims hand out GPUs: a GPU pod naming a claim "
        "or template of one is refused, since the scheduler does not count it; the defaults are "
        "NVIDIA's DRA driver's and HAMi-DRA's. With --dra-bookkeeping, gpu.nvidia.com and "
        "hami-core-gpu.project-hami.io are admitted: their claims are counted"
    ),
    "dra_bookkeeping": (
        "read DeviceClasses, ResourceSlices and ResourceClaims (resource.k8s.io/v1, Kubernetes "
        "1.34 and later) and count what allocated claims hold on the cards DRA drivers publish, "
        "beside the device-plugin pods (off: clusters that serve no resource.k8s.io/v1)"
    ),
    "dra_split_count": (
        "how many pods may share a card only a DRA driver publishes (no driver publishes a "
        "bound; a card HAMi's device plugin also registers keeps its deviceSplitCount)"
    ),
    "dra_mode": (
        "off, all or annotated: move the requests of GPU pods (all, or those annotated "
        "hami.io/device-world=dra) of a family named in --dra-device-classes into "
        "ResourceClaims of its DeviceClass, behind a scheduling gate (docs/dra.md)"
    ),
    "dra_device_classes": (
        "comma-separated FAMILY=DEVICECLASS[@DRIVER]: the DeviceClass each family's DRA claims "
        "ask, and the driver whose uuid and productName attributes the selectors read; HAMi-DRA's "
        "for NVIDIA and Hygon DCU unless set"
    ),
    "ascend_runtime_class_name": (
        "HAMi's chart's devices.ascend.runtimeClassName: the runtimeClassName set on pods "
        "given Ascend NPUs that name none, for every chip of the chart's vnpus (with "
        "--device-config-file: set vnpus.configs[].runtimeClassName there instead)"
    ),
    "ascend_hami_vnpu_core": (
        "HAMi's chart's devices.ascend.hamiVnpuCore: every node offers Ascend's soft split "
        "(hami-core) unless its hami-vnpu-core annotation says otherwise (with "
        "--device-config-file: set vnpus.hamiVnpuCore there instead)"
    ),
    "enable_ascend": (
        "schedule Huawei Ascend NPUs, as HAMi's scheduler does with --enable-ascend (its "
        "chart's devices.ascend.enabled): off, the webhook leaves their pods to the default "
        "scheduler and the vendor's device plugin"
    ),
    "enable_iluvatar": (
        "schedule Iluvatar GPUs, as HAMi's scheduler does with --enable-iluvatar (its chart's "
        "devices.iluvatar.enabled): off, the webhook leaves their pods to the default "
        "scheduler and the vendor's device plugin"
    ),
    "gfd_split_count": (
        "standalone: register nodes without HAMi's device plugin from their GPU Feature Discovery "
        f"labels ({COUNT_LABEL}, .memory, .product) and allocatable {nv.GPU}, each "
        "card shared by this many tasks (0: off, such nodes stay unregistered)"
    ),
}
