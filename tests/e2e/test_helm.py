"""The Helm chart against the real control plane: installed, and run as it renders.

* ``helm install`` into the e2e API server: every object is accepted server-side, and the
  API server itself applies the webhook's scoping (namespaceSelector, objectSelector and the CEL
  matchConditions) to dry-run pods.
* ``hami serve`` started with the arguments and environment of the rendered Deployment, under
  the chart's own RBAC (a token of the chart's ServiceAccount, made with the TokenRequest API),
  places a GPU pod; and in certificate bootstrap mode it creates its Secret, sets caBundle on
  a webhook configuration like the chart's, and the API server then calls it.
* kube-scheduler accepts the rendered KubeSchedulerConfiguration (strict decoding).

What differs from a cluster, and why (nothing else is changed):

* ``--kubeconfig`` is added: a ServiceAccount token of the chart's account, since there is no
  in-cluster config on this machine;
* ``--bind-address``, ``--port``, ``--extender-port`` and ``--metrics-port`` are the harness's
  loopback ports, and ``--metrics-bind-address`` is 127.0.0.1 (nothing here listens beyond
  loopback);
* ``POD_NAME``/``POD_NAMESPACE``/``POD_IP`` (downward API) get literal values (127.0.0.1);
* install test only: ``webhook.url`` points at a dead loopback port instead of the Service, so
  kube-apiserver never dials a ClusterIP (which would leave loopback);
* placement test only: the certificate bootstrap flags are replaced by the harness's
  ``--tls-cert-file``/``--tls-key-file``, because the harness's kube-scheduler trusts the
  harness's CA (the bootstrap has its own test); and the Lease the chart's kube-scheduler
  container would hold is written by the test;
* bootstrap test only: ``--cert-dir`` is a temporary folder, and the webhook configuration calls
  ``https://127.0.0.1:<port>/webhook`` instead of the Service (no Service routing here).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from tests.builders.chart import (
    CHART,
    EXTENDER,
    LAB12,
    Obj,
    container,
    find,
    helm,
    render,
    served_families,
)
from tests.e2e.chartrun import (
    GPU_POD,
    chart_rbac,
    chart_scheduler,
    dry_run,
    harness_args,
    harness_env,
    helm_env,
    release_name,
    release_policy_binding,
    service_account_kubeconfig,
    variant,
)

from .cluster import (
    DEVICE_PLUGIN_USER,
    REPO_ROOT,
    SCHEDULER_NAME,
    SCHEDULER_USER,
    ControlPlane,
    NodeSim,
    Process,
    _die_with_parent,
    ensure_binaries,
    free_ports,
)
from .kube import Kube, KubectlError, wait_for
from .nodespec import gke_t4_node, t4_node

pytestmark = pytest.mark.e2e

PLAIN_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "chart-probe-plain"},
    "spec": {"containers": [{"name": "app", "image": "busybox"}]},
}


# --- running the rendered hami container under the chart's RBAC --------------------------------


@pytest.mark.parametrize("preset", ["", "gke", "lab12"])
def test_helm_rendered_hami_serve_places_a_gpu_pod(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    tmp_path: Path,
    preset: str,
) -> None:
    # lab12: standalone, GFD registration, no HAMi device plugin (tests.builders.chart).
    values = LAB12 if preset == "lab12" else [f"preset={preset}"] if preset else []
    with chart_scheduler(control_plane, kube, namespace, tmp_path, *values) as args:
        assert f"--leader-elect-resource-namespace={namespace}" in args
        lab12 = preset == "lab12"
        node = gke_t4_node("chart-node", ["GPU-x"]) if lab12 else t4_node("chart-node")
        nodesim(node)
        kube.apply(json.dumps(variant(GPU_POD, metadata={"name": "placed"})), namespace)
        kube.wait_ready(namespace, ["placed"])
        pod = kube.pod(namespace, "placed")
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
        assert pod["spec"]["nodeName"] == node.name
        allocated = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
        card = "GFD-chart-node-0" if lab12 else r"GPU-chart-node-\d"
        assert re.fullmatch(rf"{card},NVIDIA,1000,\d+:;", allocated), allocated
        assert pod["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
        # HAMI_DRIVER_PROFILE=gke reached the webhook: the driver's lib64 is mounted.
        host_paths = {v.get("hostPath", {}).get("path") for v in pod["spec"].get("volumes", [])}
        assert ("/home/kubernetes/bin/nvidia/lib64" in host_paths) == bool(preset)
        # Standalone: libvgpu.so from where the chart's libvgpuInstaller puts it.
        lib = "/home/kubernetes/bin/nvidia/vgpu/libvgpu.so"
        assert (lib in host_paths) == lab12
        log = control_plane.app_log.read_text()
        assert '"became leader"' in log or "became leader" in log


# --- certificate bootstrap on the real API server ------------------------------------------------


def admissions(metrics_url: str) -> float:
    """How many admission reviews the process answered, from its /metrics."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(metrics_url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("hami_admission_duration_seconds_count")
    )


def https_ok(url: str, ca_pem: str) -> bool:
    context = ssl.create_default_context(cadata=ca_pem)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(url, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def hami_serve(
    control_plane: ControlPlane, name: str, args: Sequence[str], env: dict[str, str]
) -> Iterator[Process]:
    """`python -m hami serve ARGS` in its own process group, stopped (group and all) on exit."""
    log = control_plane.run_dir / f"{name}.log"
    paths = [p for p in control_plane.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    full_env = {
        **control_plane.env,
        "PYTHONPATH": os.pathsep.join([*paths, str(REPO_ROOT)]),
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    with log.open("ab") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "hami", "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=control_plane.run_dir,
            env=full_env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    process = Process(name, popen, log)
    try:
        yield process
    finally:
        process.stop()


def secret_data(kube: Kube, namespace: str, name: str) -> dict[str, bytes]:
    data = kube.get("secret", name, namespace)["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


def test_helm_cert_bootstrap_sets_the_ca_bundle_on_the_real_api_server(
    control_plane: ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    release = release_name("hami-certs")
    docs = render(namespace=namespace, release=release)
    hami = container(docs, EXTENDER)
    secret, configuration_name = f"{release}-scheduler-tls", f"{release}-webhook"
    port, extender_port, metrics_port = free_ports(3)
    cert_dir = tmp_path / "tls"
    # The chart's webhook configuration, calling this process directly instead of the Service.
    configuration = find(docs, "MutatingWebhookConfiguration", configuration_name)
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]
    configuration["webhooks"][0]["clientConfig"] = {"url": f"https://127.0.0.1:{port}/webhook"}
    kube.apply(json.dumps(configuration))

    args = [
        a.replace("--cert-dir=/tls", f"--cert-dir={cert_dir}")
        for a in harness_args(hami["args"], tmp_path / "sa.kubeconfig")
    ]
    args += ["--bind-address=127.0.0.1", f"--port={port}", f"--metrics-port={metrics_port}"]
    args += [f"--extender-port={extender_port}"]
    env = harness_env(hami, f"{release}-scheduler-7d4b8-qq2vx", namespace)
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

    def start(name: str) -> contextlib.AbstractContextManager[Process]:
        return hami_serve(control_plane, name, args, env)

    def ready(process: Process) -> None:
        def up() -> bool:
            if not process.alive():
                raise process.fail("while starting")
            try:
                ca = secret_data(kube, namespace, secret)["ca.crt"].decode()
            except KubectlError:
                return False
            return https_ok(f"https://127.0.0.1:{port}/readyz", ca)

        wait_for(up, timeout=60, what=f"{process.name} to serve with the bootstrapped pair")

    try:
        with chart_rbac(kube, docs, tmp_path), release_policy_binding(kube, release):
            service_account_kubeconfig(
                control_plane, namespace, f"{release}-scheduler", tmp_path / "sa.kubeconfig"
            )
            with start("hami-serve.bootstrap.1") as process:
                ready(process)  # TLS verified against ca.crt of the Secret, for 127.0.0.1
                stored = kube.get("secret", secret, namespace)
                assert stored["metadata"]["annotations"]["hami.io/cert-bootstrap"] == "v1"
                data = secret_data(kube, namespace, secret)
                assert data["ca-bundle.crt"] == data["ca.crt"]
                for name in ("tls.crt", "tls.key"):
                    assert (cert_dir / name).read_bytes() == data[name], name
                assert (cert_dir / "ca.crt").read_bytes() == data["ca.crt"]
                leaf = x509.load_pem_x509_certificate(data["tls.crt"])
                leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(data["ca.crt"]))
                names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                assert set(names.value.get_values_for_type(x509.DNSName)) == {
                    f"{release}-scheduler",
                    f"{release}-scheduler.{namespace}",
                    f"{release}-scheduler.{namespace}.svc",
                }

                def bundle() -> bytes | None:
                    live = kube.get("mutatingwebhookconfiguration", configuration_name)
                    value = live["webhooks"][0]["clientConfig"].get("caBundle")
                    return base64.b64decode(value) if value else None

                assert wait_for(bundle, timeout=30, what="caBundle") == data["ca.crt"]

                # The API server now calls this process, trusting it through that caBundle:
                # with failurePolicy Fail, a wrong bundle would refuse the pod.
                before = admissions(metrics_url)

                def mutated() -> bool:
                    result = dry_run(kube, GPU_POD, "default")
                    return (
                        result.returncode == 0
                        and json.loads(result.stdout)["spec"]["schedulerName"] == SCHEDULER_NAME
                        and admissions(metrics_url) > before
                    )

                wait_for(mutated, timeout=30, what="a dry-run GPU pod mutated through caBundle")
                # Scoping: neither the release namespace nor a pod without GPU resources.
                count = admissions(metrics_url)
                assert dry_run(kube, GPU_POD, namespace).returncode == 0
                assert dry_run(kube, PLAIN_POD, "default").returncode == 0
                assert admissions(metrics_url) == count

            # A restart reuses the Secret: same CA, nothing written, caBundle untouched.
            version = kube.get("secret", secret, namespace)["metadata"]["resourceVersion"]
            with start("hami-serve.bootstrap.2") as process:
                ready(process)
                assert (
                    kube.get("secret", secret, namespace)["metadata"]["resourceVersion"] == version
                )
                assert bundle() == data["ca.crt"]
                assert (cert_dir / "tls.crt").read_bytes() == data["tls.crt"]

            # A damaged Secret (the CA key lost) is replaced in place (an update with its
            # resourceVersion) and caBundle follows the new CA.
            kube(
                "patch",
                "secret",
                secret,
                "-n",
                namespace,
                "--type=json",
                "-p",
                '[{"op": "remove", "path": "/data/ca.key"}]',
            )
            with start("hami-serve.bootstrap.3") as process:
                ready(process)
                renewed = secret_data(kube, namespace, secret)
                assert renewed["ca.crt"] != data["ca.crt"]
                assert "ca.key" in renewed
                assert wait_for(
                    lambda: bundle() == renewed["ca.crt"], timeout=30, what="the new caBundle"
                )
                before = admissions(metrics_url)
                wait_for(
                    lambda: (
                        dry_run(kube, GPU_POD, "default").returncode == 0
                        and admissions(metrics_url) > before
                    ),
                    timeout=30,
                    what="a dry-run GPU pod through the new caBundle",
                )
                # Unregister while still serving, until the API server has stopped calling us,
                # so that no later test meets a Fail webhook with nobody behind it.
                kube("delete", "mutatingwebhookconfiguration", configuration_name)

                def forgotten() -> bool:
                    count = admissions(metrics_url)
                    return (
                        dry_run(kube, GPU_POD, "default").returncode == 0
                        and admissions(metrics_url) == count
                    )

                wait_for(forgotten, timeout=30, what="the API server to stop calling the webhook")
    finally:
        kube("delete", "mutatingwebhookconfiguration", configuration_name, "--ignore-not-found")


# --- helm install ------------------------------------------------------------------------------


def test_helm_install_is_accepted_server_side_and_the_api_server_scopes_the_webhook(
    control_plane: ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    release = release_name("hami-install")
    env = helm_env(control_plane, tmp_path)
    # The webhook is called at a loopback port where nothing listens: through the Service,
    # kube-apiserver would dial a ClusterIP, off loopback (and nothing serves it here either).
    (dead_port,) = free_ports(1)
    dead_url = f"https://127.0.0.1:{dead_port}/webhook"
    values = [
        "preset=gke",
        "devicePlugin.monitor.enabled=true",
        "webhook.timeoutSeconds=5",
        f"webhook.url={dead_url}",
        "metrics.networkPolicy.enabled=true",
    ]
    install = ["install", release, str(CHART), "--namespace", namespace]
    for value in values:
        install += ["--set", value]
    scrapers = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    install += ["--set-json", f"metrics.networkPolicy.from={json.dumps(scrapers)}"]
    # A GPU pod created before the install (through the harness's webhook), nobody schedules it:
    # the chart's webhook must also be asked when kubectl debug adds a container to it.
    target = f"debug-{secrets.token_hex(3)}"
    kube("create", "namespace", target)
    kube(
        "create",
        "-n",
        target,
        "-f",
        "-",
        stdin=json.dumps(variant(GPU_POD, spec__schedulerName="nobody")),
    )
    # This release's admission policy must not lock the harness's scheduler and simulator out.
    install += ["--set-json", f'admissionPolicy.schedulerUsers=["{SCHEDULER_USER}"]']
    install += ["--set-json", f'admissionPolicy.devicePluginUsers=["{DEVICE_PLUGIN_USER}"]']
    try:
        helm(*install, env=env)
        manifest = helm("get", "manifest", release, "--namespace", namespace, env=env).stdout
        docs = [d for d in yaml.safe_load_all(manifest) if d]
        (tmp_path / "manifest.yaml").write_text(manifest)
        listed = kube("get", "-f", str(tmp_path / "manifest.yaml"), "-o", "name").stdout.split()
        assert len(listed) == len(docs) >= 18, listed
        kinds = {d["kind"] for d in docs}
        assert {
            "Deployment",
            "DaemonSet",
            "MutatingWebhookConfiguration",
            "NetworkPolicy",
            "ResourceQuota",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        } <= kinds
        # The server kept what the chart's scoping relies on (an API server that did not know
        # matchConditions would silently drop it).
        live = kube.get("mutatingwebhookconfiguration", f"{release}-webhook")["webhooks"][0]
        assert live["matchConditions"][0]["name"] == "asks-for-gpu-sharing"
        assert live["failurePolicy"] == "Fail"
        image = kube.get("deployment", f"{release}-scheduler", namespace)["spec"]["template"]
        # scheduler.draBookkeeping=auto asked this API server (1.36, resource.k8s.io/v1 served)
        # through Helm's discovery, which `helm template` offline does not have.
        (extender,) = [c for c in image["spec"]["containers"] if c["name"] == EXTENDER]
        assert "--dra-bookkeeping=true" in extender["args"]
        version = json.loads(kube("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
        assert image["spec"]["containers"][0]["image"] == (
            f"registry.k8s.io/kube-scheduler:{version.split('-')[0]}"
        )

        # No replica can answer (nothing runs the pods here), so every pod the webhook is
        # asked about is refused: the API server's own scoping decides which ones.
        ignored = f"ignored-{secrets.token_hex(3)}"
        kube("create", "namespace", ignored)
        kube("label", "namespace", ignored, "hami.io/webhook=ignore")

        def refused(pod: Obj, ns: str) -> bool:
            result = dry_run(kube, pod, ns)
            return result.returncode != 0 and dead_url in result.stderr

        wait_for(lambda: refused(GPU_POD, "default"), timeout=30, what="the chart's webhook")
        init_only = variant(
            PLAIN_POD,
            spec__initContainers=[
                {
                    "name": "warmup",
                    "image": "busybox",
                    "resources": {"requests": {"nvidia.com/gpumem-percentage": "10"}},
                }
            ],
        )
        cores_request = variant(
            PLAIN_POD,
            spec__containers=[
                {
                    "name": "app",
                    "image": "busybox",
                    "resources": {"requests": {"nvidia.com/gpucores": "30"}},
                }
            ],
        )
        assert refused(init_only, "default"), "a GPU request in an init container counts"
        assert refused(cores_request, "default"), "requests count, not only limits"
        kai_form = variant(
            PLAIN_POD,
            metadata={"name": "kai", "annotations": {"gpu-memory": "4096"}},
            spec__schedulerName="kai-scheduler",
        )
        assert refused(kai_form, "default"), "KAI's gpu-memory annotation is translated here"
        # A pod's own ignore label spares it the mutation only: it still comes to be checked.
        labelled = variant(GPU_POD, metadata={"name": "x", "labels": {"hami.io/webhook": "ignore"}})
        assert refused(labelled, "default"), "a pod labelled hami.io/webhook=ignore is checked"
        # Ephemeral containers reach the webhook (pods/ephemeralcontainers) on their GPU pod.
        debugged = kube("debug", "-n", target, "pod/chart-probe", "--image=busybox", check=False)
        assert debugged.returncode != 0 and dead_url in debugged.stderr, debugged.stderr
        for pod, ns, why in (
            (PLAIN_POD, "default", "no GPU resource (matchConditions)"),
            (
                variant(PLAIN_POD, metadata={"name": "k", "annotations": {"gpu-memory": "1"}}),
                "default",
                "KAI's annotation on a pod that does not name kai-scheduler",
            ),
            (GPU_POD, namespace, "the release namespace"),
            (GPU_POD, "kube-system", "kube-system"),
            (GPU_POD, ignored, "a namespace labelled hami.io/webhook=ignore"),
        ):
            result = dry_run(kube, pod, ns)
            assert result.returncode == 0, f"{why}: {result.stderr}"
    finally:
        kube("delete", "pods", "--all", "-n", target, "--force", "--grace-period=0", timeout=90)
        helm("uninstall", release, "--namespace", namespace, "--wait", env=env, check=False)
        # The uninstalled webhook must be gone for the API server before the next test's GPU pods.
        wait_for(
            lambda: dry_run(kube, GPU_POD, "default").returncode == 0,
            timeout=30,
            what="the uninstalled webhook to stop refusing GPU pods",
        )


# HAMi v2.10's chart's `devices` values (charts/hami/values.yaml), as a HAMi user has them.
HAMI_DEVICES: dict[str, Any] = {
    "amd": {"customresources": ["amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"]},
    "awsneuron": {"customresources": ["aws.amazon.com/neuron", "aws.amazon.com/neuroncore"]},
    "kunlun": {
        "enabled": True,
        "customresources": ["kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"],
    },
    "enflame": {
        "enabled": True,
        "customresources": [
            "enflame.com/drs-gcu",
            "enflame.com/gcu-memory",
            "enflame.com/gcu-core",
            "enflame.com/gcu",
        ],
    },
    "mthreads": {"enabled": True, "customresources": ["mthreads.com/vgpu"]},
    "vastai": {"enabled": True, "customresources": ["vastaitech.com/va"]},
    "biren": {"enabled": True, "customresources": ["birentech.com/gpu"]},
    "nvidia": {"gpuCorePolicy": "default", "libCudaLogLevel": 1},
    "ascend": {
        "enabled": True,
        "image": "",
        "imagePullPolicy": "IfNotPresent",
        "extraArgs": [],
        "nodeSelector": {"ascend": "on"},
        "tolerations": [],
        "runtimeClassName": "",
        "hamiVnpuCore": False,
        "customresources": [f"huawei.com/Ascend910B3{s}" for s in ("", "-memory", "-core")],
    },
    "iluvatar": {
        "enabled": True,
        "customresources": [f"iluvatar.ai/BI-V150{s}" for s in ("-vgpu", ".vCore", ".vMem")],
    },
}
HAMI_SRC = Path("/work/hami-src")


# --- kube-scheduler reads the rendered configuration ----------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        ["scheduler.replicas=2"],
        ["scheduler.replicas=1", "scheduler.leaderElect=false"],
        # HAMi's chart's device values, with a resource name of the user's beside them.
        [
            f"devices={json.dumps(HAMI_DEVICES)}",
            "devices.ascend.customresources[0]=example.com/npu",
        ],
    ],
    ids=["ha", "single", "families"],
)
def test_helm_kube_scheduler_accepts_the_rendered_configuration(
    tmp_path: Path, values: list[str]
) -> None:
    bin_dir = ensure_binaries()
    config = yaml.safe_load(find(render(*values), "ConfigMap")["data"]["config.yaml"])
    # Only to let it start: in the pod it uses the in-cluster config.
    kubeconfig = tmp_path / "unused.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "unused"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [
            str(bin_dir / "kube-scheduler"),
            f"--config={tmp_path / 'config.yaml'}",
            f"--write-config-to={tmp_path / 'effective.yaml'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    effective = yaml.safe_load((tmp_path / "effective.yaml").read_text())
    (extender,) = effective["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:9444"
    assert extender["nodeCacheCapable"] is True
    assert effective["profiles"][0]["schedulerName"] == SCHEDULER_NAME


# --- HAMi's chart's device-family values and its device-config override --------------------------


def _hamis_device_config() -> str:
    """HAMi's chart's own device-config.yaml where its source is at hand, else the part of it
    the families read (their defaults)."""
    if (HAMI_SRC / "charts" / "hami").is_dir():
        from tests.builders.chart import helm_binary
        from tests.reference.record_hami import chart_device_config

        return chart_device_config(helm_binary(), HAMI_SRC)
    # A section names only what it gives (HAMi reads a left-out name as none): Hygon's whole.
    return (
        "nvidia:\n  resourceCountName: nvidia.com/gpu\nhygon:\n"
        "  resourceCountName: hygon.com/dcunum\n  resourceMemoryName: hygon.com/dcumem\n"
        "  resourceCoreName: hygon.com/dcucores\n  memoryFactor: 1\n"
    )


def test_helm_hamis_device_values_and_device_config_render_for_hami_serve(tmp_path: Path) -> None:
    from tests.builders import FAMILIES

    text = _hamis_device_config()
    docs = render(
        f"devices={json.dumps(HAMI_DEVICES)}",
        f"device-config={json.dumps({'content': text})}",
    )
    # Every family's resources go to the webhook and to the extender, as in HAMi's chart.
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    (scheduler,) = [m for m in maps.values() if "config.yaml" in m]
    config = yaml.safe_load(scheduler["config.yaml"])
    managed = {r["name"] for r in config["extenders"][0]["managedResources"]}
    assert set(FAMILIES.other_resource_names()) <= managed
    # The override is mounted where hami serve's flag points, and hami serve reads it as it is.
    (device,) = [m["device-config.yaml"] for n, m in maps.items() if n.endswith("-device")]
    assert yaml.safe_load(device) == yaml.safe_load(text)
    serve = container(docs, EXTENDER)
    assert "--device-config-file=/device-config.yaml" in serve["args"]
    (mount,) = [m for m in serve["volumeMounts"] if m["name"] == "device-config"]
    assert (mount["mountPath"], mount["subPath"]) == ("/device-config.yaml", "device-config.yaml")
    # HAMi's values enable Ascend and Iluvatar: every family is scheduled.
    families = served_families(docs, tmp_path)
    assert [f.wire for f in families.members] == [f.wire for f in FAMILIES.members]
    # Without an override nothing is mounted, and hami serve runs with the defaults.
    plain = container(render(f"devices={json.dumps(HAMI_DEVICES)}"), EXTENDER)
    assert not any(a.startswith("--device-config-file") for a in plain["args"])


RENAMING_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
hygon:
  resourceCountName: example.com/dcu
  resourceMemoryName: example.com/dcu-mem
  resourceCoreName: example.com/dcu-cores
  memoryFactor: 2
vnpus:
  hamiVnpuCore: true
  configs:
  - commonWord: AscendX
    chipName: X
    resourceName: example.com/npu
    resourceMemoryName: example.com/npu-memory
    memoryAllocatable: 32768
    memoryCapacity: 32768
    aiCore: 20
    templates:
    - {name: vir05, memory: 8192, aiCore: 5}
iluvatars:
- {commonWord: MR-V100, chipName: MR-V100, resourceCountName: example.com/mr-v100}
"""


def test_helm_a_device_config_renaming_resources_renders_for_the_webhook_and_extender(
    tmp_path: Path,
) -> None:
    """The override's names go where the chart's defaults go (the webhook's matchConditions,
    the extender's managedResources), the file reaches hami serve as it is, and hami serve
    builds its families from it."""
    gated = ("devices.ascend.enabled=true", "devices.iluvatar.enabled=true")
    docs = render(f"device-config={json.dumps({'content': RENAMING_CONFIG})}", *gated)
    renamed = (
        "example.com/dcu",
        "example.com/dcu-mem",
        "example.com/dcu-cores",
        "example.com/npu",
        "example.com/npu-memory",
        "example.com/mr-v100",
    )
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    (scheduler,) = [m for m in maps.values() if "config.yaml" in m]
    extender = yaml.safe_load(scheduler["config.yaml"])["extenders"][0]
    managed = [r["name"] for r in extender["managedResources"]]
    assert set(renamed) <= set(managed)
    assert len(managed) == len(set(managed))
    (webhook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    condition = webhook["matchConditions"][0]
    for name in renamed:
        assert condition["expression"].count(f"'{name}'") == 4, name
    (device,) = [m["device-config.yaml"] for n, m in maps.items() if n.endswith("-device")]
    assert device.strip() == RENAMING_CONFIG.strip()
    assert "--device-config-file=/device-config.yaml" in container(docs, EXTENDER)["args"]
    by_type = served_families(docs, tmp_path).by_type()
    dcu = by_type["DCU"].wire.resources
    assert (dcu.count, dcu.memory, dcu.cores, dcu.memory_factor) == (*renamed[:3], 2)
    assert by_type["AscendX"].wire.resources.count == "example.com/npu"
    assert "Ascend910B3" not in by_type  # HAMi loads only the chips `vnpus` lists
    assert by_type["MR-V100"].wire.resources.count == "example.com/mr-v100"


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("devices.ascend.runtimeClassName=[1]", "/devices/ascend/runtimeClassName"),
        ("devices.ascend.hamiVnpuCore=yes", "/devices/ascend/hamiVnpuCore"),
        ("devices.nvidia.gpuCorePolicy=sometimes", "/devices/nvidia/gpuCorePolicy"),
        ("devices.cuda.enabled=true", "additional properties 'cuda'"),
    ],
)
def test_helm_device_values_hami_serve_cannot_honour_are_refused(value: str, refused: str) -> None:
    from tests.builders.chart import template_args

    result = helm(*template_args(value), check=False)
    assert result.returncode != 0 and refused in result.stderr, result.stderr
