// The control plane's commands, imported for `go mod tidy` so that go.sum
// holds every module their builds need.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
