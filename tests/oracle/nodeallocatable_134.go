//go:build k8s134

package main

// DRANodeAllocatableResources does not exist in 1.34 (nodeallocatable.go is 1.37's): a case's
// pod is not judged, and the answer says so.

import (
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

type nodeResources struct{}

func readNodeResources(line []byte, _ gates, unknown *[]string) (nodeResources, error) {
	var c struct {
		Pod json.RawMessage `json:"pod"`
	}
	if err := json.Unmarshal(line, &c); err != nil {
		return nodeResources{}, err
	}
	if len(c.Pod) > 0 && string(c.Pod) != "null" {
		*unknown = append(*unknown, "pod: 1.34 has no DRANodeAllocatableResources (node resources not judged)")
	}
	return nodeResources{}, nil
}

func checkNodeResources(nodeResources, *v1.Node, []*resourceapi.ResourceSlice, []*resourceapi.ResourceClaim, []resourceapi.AllocationResult) (any, string, error) {
	return nil, "", nil
}
