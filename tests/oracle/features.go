package main

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// gates is a case's list of enabled DRA feature gates (every other gate is off), read the way
// kube-scheduler 1.37 reads its feature gates: pkg/scheduler/framework/plugins/dynamicresources
// (AllocatorFeatures, and the cel.Features of the plugin's CEL cache).
type gates map[string]bool

// Gates a case may name. The ones that set no structured.Features field change what the
// scheduler feeds the allocator (claims, slices), not the allocator itself.
var knownGates = map[string]bool{
	"DRAAdminAccess":               true,
	"DRAPrioritizedList":           true,
	"DRAPartitionableDevices":      true,
	"DRADeviceTaints":              true,
	"DRADeviceTaintRules":          true,
	"DRAConsumableCapacity":        true,
	"DRADeviceBindingConditions":   true,
	"DRAResourceClaimDeviceStatus": true,
	"DRAExtendedResource":          true,
	"DRAListTypeAttributes":        true,
	"DRAWorkloadResourceClaims":    true,
	"DRASchedulerFilterTimeout":    true,
	"DRAFractionalCapacityRange":   true,
	"DRAOptionalNodeOperations":    true,
	"DRADeviceCompatibilityGroups": true,
	"DRANodeAllocatableResources":  true,
	"DRADerivedAttributes":         true,
	"DynamicResourceAllocation":    true,
	"DRAPartitionableDevicesType":  true,
}

func parseGates(names []string) (gates, error) {
	g := gates{}
	for _, name := range names {
		if !knownGates[name] {
			return nil, fmt.Errorf("unknown feature gate %q", name)
		}
		g[name] = true
	}
	return g, nil
}

func (g gates) allocator() structured.Features {
	return structured.Features{
		AdminAccess:             g["DRAAdminAccess"],
		PrioritizedList:         g["DRAPrioritizedList"],
		PartitionableDevices:    g["DRAPartitionableDevices"],
		DeviceTaints:            g["DRADeviceTaints"],
		DeviceBindingAndStatus:  g["DRADeviceBindingConditions"] && g["DRAResourceClaimDeviceStatus"],
		ConsumableCapacity:      g["DRAConsumableCapacity"],
		FractionalCapacityRange: g["DRAFractionalCapacityRange"],
		ListTypeAttributes:      g["DRAListTypeAttributes"],
		OptionalNodeOperations:  g["DRAOptionalNodeOperations"],
		DerivedAttributes:       g["DRADerivedAttributes"],
		CompatibilityGroups:     g["DRADeviceCompatibilityGroups"],
	}
}

func (g gates) cel() cel.Features {
	return cel.Features{
		EnableConsumableCapacity: g["DRAConsumableCapacity"],
		EnableListTypeAttributes: g["DRAListTypeAttributes"],
	}
}
