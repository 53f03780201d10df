// Command etcd is upstream's etcd server main (server/main.go), built here
// because etcd's own module cannot be installed with `go install`.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
