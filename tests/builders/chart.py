"""The Helm chart (helm/hami) as the real helm binary renders it, and the lookups the chart's
tests make in what it rendered (tests/unit/test_helm_render.py and the e2e tier's chart tests).

helm is $HAMI_HELM, else the one tests/e2e/k8sbins/build.sh builds, else helm on PATH.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from hami.cli import parser
from hami.engine.families.registry import Families
from hami.runtime.settingsload import load_settings

Obj = dict[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "helm" / "hami"
# The hami serve container, under HAMi's chart's name for it (Lab 14 Step 8 reads its log).
EXTENDER = "vgpu-scheduler-extender"
KUBE_VERSION = "1.36.0"
# What a 1.36 cluster's discovery tells Helm and its offline list lacks: the chart's
# scheduler.draBookkeeping=auto asks for the kind, which only discovery lists.
API_VERSIONS = ("resource.k8s.io/v1/ResourceSlice",)
RELEASE = "hami-py"
NAMESPACE = "hami-system"


def helm_binary() -> Path:
    from tests.e2e.cluster import built_tool

    return built_tool("helm", "HAMI_HELM")


def helm(
    *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def template_args(
    *values: str,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    kube_version: str = KUBE_VERSION,
    api_versions: tuple[str, ...] = API_VERSIONS,
) -> list[str]:
    """`helm template` arguments; `values` are --set/--set-json style pairs like "a.b=c"."""
    args = [
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        kube_version,
    ]
    for api in api_versions:
        args += ["--api-versions", api]
    for value in values:
        flag = "--set-json" if value.split("=", 1)[1][:1] in "[{" else "--set"
        args += [flag, value]
    return args


def render(
    *values: str,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    kube_version: str = KUBE_VERSION,
) -> list[Obj]:
    out = helm(
        *template_args(*values, namespace=namespace, release=release, kube_version=kube_version)
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(docs: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    matches = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def kinds(docs: Iterable[Obj]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def container(docs: Iterable[Obj], name: str, kind: str = "Deployment") -> Obj:
    workload = find(docs, kind)
    found: list[Obj] = [
        c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name
    ]
    assert len(found) == 1, f"{kind} has no container {name}"
    return found[0]


def env_of(c: Obj) -> dict[str, Any]:
    """name -> value, or the valueFrom object."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def scheduler_config(docs: Iterable[Obj]) -> Obj:
    config: Obj = yaml.safe_load(
        find(docs, "ConfigMap", "hami-py-scheduler")["data"]["config.yaml"]
    )
    return config


def rules(role: Obj) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    """(apiGroup, resource, resourceNames, verbs) per group and resource, in order."""
    out = []
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.append(
                    (group, resource, tuple(rule.get("resourceNames", ())), tuple(rule["verbs"]))
                )
    return out


def settings_from(c: Obj, extra_env: dict[str, str] | None = None) -> Any:
    """Parse a rendered container's args and env exactly as `hami serve` would."""
    env = {k: v for k, v in env_of(c).items() if isinstance(v, str)}
    env.update({"POD_NAME": "hami-py-scheduler-7d9f-abcde", "POD_NAMESPACE": NAMESPACE})
    env.update(extra_env or {})
    args = parser().parse_args(["serve", *c["args"]])
    return load_settings(args, env=env)


def served_families(docs: list[Obj], tmp_path: Path) -> Families:
    """The families hami serve builds from the rendered container's args, a device-config
    override it mounts read from a local copy of the ConfigMap."""
    from hami.runtime.config import device_config

    serve = container(docs, EXTENDER)
    path = tmp_path / "device-config.yaml"
    maps = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-device")
    ]
    for m in maps:
        path.write_text(m["data"]["device-config.yaml"])
    args = [a.replace("=/device-config.yaml", f"={path}") for a in serve["args"]]
    families: Families = device_config(settings_from({**serve, "args": args})).families
    return families


# Lab 14, Step 3, verbatim; only the chart name differs (ours is a folder, not a repository chart).
LAB14_STEP3 = r"""
helm install hami hami-charts/hami -n kube-system --version 2.10.0 \
  --set devicePlugin.nvidiaDriverRoot=/home/kubernetes/bin/nvidia \
  --set global.gpuHookPath=/home/kubernetes/bin/nvidia \
  --set devicePlugin.libPath=/home/kubernetes/bin/nvidia/vgpu \
  --set devicePlugin.monitor.ctrPath=/home/kubernetes/bin/nvidia/vgpu/containers \
  --set-json 'devicePlugin.extraEnvs=[{"name":"LD_LIBRARY_PATH","value":"/driver-root/lib64"}]'
"""


def lab14_step3_manifest() -> str:
    argv = shlex.split(LAB14_STEP3.replace("\\\n", " "))
    assert argv[:2] == ["helm", "install"] and argv[3] == "hami-charts/hami"
    # `helm template` takes install's flags; --kube-version stands in for the cluster.
    cluster = ["--kube-version", KUBE_VERSION, *(f"--api-versions={a}" for a in API_VERSIONS)]
    return helm("template", argv[2], str(CHART), *argv[4:], *cluster).stdout


# Lab 12's values: standalone, without HAMi's device plugin.
LAB12 = (
    "preset=gke",
    "devicePlugin.enabled=false",
    "webhook.injection.mode=standalone",
    "gfdRegistration.enabled=true",
    "gfdRegistration.splitCount=4",
    "libvgpuInstaller.enabled=true",
    "libvgpuInstaller.image=projecthami/hami:v2.10.0",
)


def notes(tmp_path: Path, namespace: str, *sets: str) -> str:
    chart = tmp_path / "hami"
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "test.notes" -}}\n' + text + "{{- end }}\n"
    )
    (chart / "templates" / "notes.yaml").write_text(
        'kind: Notes\ntext: {{ include "test.notes" . | toJson }}\n'
    )
    args = ["template", "hami-py", str(chart), "-n", namespace, "--kube-version", KUBE_VERSION]
    for value in sets:
        args += ["--set", value]
    out = helm(*args, "--show-only", "templates/notes.yaml").stdout
    return str(yaml.safe_load(out)["text"])


ADMISSION_POLICY_REFUSED = (
    "is scheduling state that only the GPU scheduler and its device plugin write"
)
