// Command kubelet is upstream's kubelet main (cmd/kubelet/kubelet.go), for the
// e2e node tier.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
