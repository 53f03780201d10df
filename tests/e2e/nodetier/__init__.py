"""The node tier: a real kubelet, containerd and kube-proxy in a private network namespace."""
