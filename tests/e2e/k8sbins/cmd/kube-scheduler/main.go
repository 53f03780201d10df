// Command kube-scheduler is upstream's kube-scheduler main.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.RunContext(genericapiserver.SetupSignalContext(), app.NewSchedulerCommand()))
}
