"""Pod manifests drawn for the property tests: containers and init containers of any request,
with the pod's GPU and node policies."""

from typing import Any

from hypothesis import strategies as st

container = st.fixed_dictionaries(
    {"nvidia.com/gpu": st.integers(1, 3)},
    optional={
        "nvidia.com/gpumem": st.integers(1, 20000),
        "nvidia.com/gpumem-percentage": st.integers(1, 100),
        "nvidia.com/gpucores": st.integers(0, 100),
    },
)


def manifest(i: int, spec: tuple[Any, ...]) -> dict[str, Any]:
    apps, inits, gpu_policy, node_policy = spec
    return {
        "metadata": {
            "name": f"p{i}",
            "namespace": "t",
            "uid": f"u{i}",
            "annotations": {
                "hami.io/gpu-scheduler-policy": gpu_policy,
                "hami.io/node-scheduler-policy": node_policy,
            },
        },
        "spec": {
            "initContainers": [
                {"name": f"i{k}", "resources": {"limits": c}} for k, c in enumerate(inits)
            ],
            "containers": [
                {"name": f"c{k}", "resources": {"limits": c}} for k, c in enumerate(apps)
            ],
        },
        "status": {"phase": "Pending"},
    }
