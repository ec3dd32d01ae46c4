//go:build tools

// Package k8sbuild names the commands built from this module so that `go mod tidy` keeps their
// dependencies in go.sum.
package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
