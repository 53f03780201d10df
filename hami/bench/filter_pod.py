"""The pod that `hami bench --http` asks /filter to place."""

from typing import Any

from hami.engine import names
from hami.engine import nvidianames as nv


def filter_pod(uid: str, memreq: int, policy: str = "", node_policy: str = "") -> dict[str, Any]:
    """A GPU pod as kube-scheduler sends it: after our webhook, with managedFields (~3 KB)."""
    limits = {nv.GPU: "1", nv.GPUMEM: str(memreq)}
    annotations = {names.GPU_POLICY: policy, names.NODE_POLICY: node_policy}
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"bench-{uid}",
            "namespace": "bench",
            "uid": uid,
            "resourceVersion": "123456",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "bench", "hami.run/bench": "true"},
            "annotations": {k: v for k, v in annotations.items() if v},
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:hami.run/bench": {}}},
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"cuda"}': {
                                    ".": {},
                                    "f:command": {},
                                    "f:env": {},
                                    "f:image": {},
                                    "f:imagePullPolicy": {},
                                    "f:name": {},
                                    "f:resources": {".": {}, "f:limits": {}},
                                    "f:terminationMessagePath": {},
                                    "f:terminationMessagePolicy": {},
                                }
                            },
                            "f:dnsPolicy": {},
                            "f:restartPolicy": {},
                            "f:schedulerName": {},
                            "f:securityContext": {},
                            "f:terminationGracePeriodSeconds": {},
                        },
                    },
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "command": ["sleep", "infinity"],
                    "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
                    "resources": {"limits": limits, "requests": limits},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "hami-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }
