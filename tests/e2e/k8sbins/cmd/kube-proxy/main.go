// Command kube-proxy is upstream's kube-proxy main (cmd/kube-proxy/proxy.go),
// for the e2e node tier: it makes Service ClusterIPs reachable inside the
// tier's network namespace.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
