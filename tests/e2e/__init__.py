"""`make e2e`: the extender between a real kube-scheduler, kube-apiserver and
kube-controller-manager, built from the Go module proxy by scripts/e2e/build.sh."""
