//go:build k8s134

package main

// The released code's feature switches for 1.34 (k8s.io/dynamic-resource-allocation v0.34.4),
// as kube-scheduler 1.34 sets them (pkg/scheduler/framework/plugins/dynamicresources). Built
// with -tags k8s134 and release-1.34/go.mod by scripts/oracle/build.sh 1.34; features.go is
// the same for 1.37.

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// The release whose gates knownGates lists.
const release = "1.34"

// The DRA gates of 1.34 (kubernetes v1.34.4 pkg/features). A gate of a later release is an
// error, as kube-scheduler 1.34 refuses it.
var knownGates = map[string]bool{
	"DRAAdminAccess":               true,
	"DRAPrioritizedList":           true,
	"DRAPartitionableDevices":      true,
	"DRADeviceTaints":              true,
	"DRAConsumableCapacity":        true,
	"DRADeviceBindingConditions":   true,
	"DRAResourceClaimDeviceStatus": true,
	"DRAExtendedResource":          true,
	"DRASchedulerFilterTimeout":    true,
	"DynamicResourceAllocation":    true,
}

func (g gates) allocator() structured.Features {
	return structured.Features{
		AdminAccess:          g["DRAAdminAccess"],
		PrioritizedList:      g["DRAPrioritizedList"],
		PartitionableDevices: g["DRAPartitionableDevices"],
		DeviceTaints:         g["DRADeviceTaints"],
		DeviceBinding:        g["DRADeviceBindingConditions"],
		DeviceStatus:         g["DRAResourceClaimDeviceStatus"],
		ConsumableCapacity:   g["DRAConsumableCapacity"],
	}
}

func (g gates) cel() cel.Features {
	return cel.Features{EnableConsumableCapacity: g["DRAConsumableCapacity"]}
}

func widestCEL() cel.Features {
	return cel.Features{EnableConsumableCapacity: true}
}

// 1.34's allocator has no node-only error: every error fails the pod's scheduling attempt.
func nodeOnly(error) bool {
	return false
}

// chooseVariant: 1.34's NewAllocator cannot be told which variant to run (no EnableAllocators).
func chooseVariant(name string) (func(), error) {
	if name == "" {
		return func() {}, nil
	}
	return nil, fmt.Errorf("allocatorVariant %q: the 1.34 allocator always runs the variant its gates pick", name)
}
