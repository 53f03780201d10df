"""The image a user builds: the node tier builds it from the repository's Dockerfile with the
buildah command docs/install.md gives (tests/e2e/images/build.sh), and here the real kubelet
runs it, as the chart's default reference, with `--help` after its `hami serve` entrypoint."""

from __future__ import annotations

import pytest

from .nodetier.cluster import NodeCluster

pytestmark = [pytest.mark.node, pytest.mark.e2e]  # the built binaries, a real kubelet


def test_the_built_image_runs_hami_serve(node_tier: NodeCluster) -> None:
    kube = node_tier.plane.kube
    # Arguments after `--` go after the image's ENTRYPOINT ["hami", "serve"].
    kube(
        "run", "image-help", "--image=hami-py:0.1.0",  # the chart's default repository:tag
        "--image-pull-policy=Never", "--restart=Never", "--", "--help",
    )  # fmt: skip
    kube(
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/image-help",
        "--timeout=120s",
        timeout=130,
    )
    out = kube("logs", "image-help").stdout
    assert out.startswith("usage: hami serve"), out
    assert "--tls-cert-file" in out and "env HAMI_KUBECONFIG" in out
    kube("delete", "pod", "image-help", "--wait=true", timeout=60)
