package main

// A case's feature gates, shared by both releases' oracles: features.go (1.37) and
// features_134.go (1.34, -tags k8s134) say which gates their release has (knownGates) and how
// its kube-scheduler hands them to the allocator and the CEL environment.

import "fmt"

// gates is a case's list of enabled DRA feature gates (every other gate is off), read the way
// kube-scheduler reads its feature gates: pkg/scheduler/framework/plugins/dynamicresources
// (AllocatorFeatures, and the cel.Features of the plugin's CEL cache).
type gates map[string]bool

// parseGates refuses a gate the release does not have, as its kube-scheduler refuses the flag.
func parseGates(names []string) (gates, error) {
	g := gates{}
	for _, name := range names {
		if !knownGates[name] {
			return nil, fmt.Errorf("unknown feature gate %q (Kubernetes %s)", name, release)
		}
		g[name] = true
	}
	return g, nil
}
