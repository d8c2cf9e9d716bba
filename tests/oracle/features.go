//go:build !k8s134

package main

// The released code's feature switches for 1.37 (k8s.io/dynamic-resource-allocation v0.37.2);
// features_134.go is the same for 1.34 (built with -tags k8s134, scripts/oracle/build.sh 1.34).

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// The release whose gates knownGates lists.
const release = "1.37"

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

// widestCEL is the CEL environment with every field and function the release has: the
// extender's, for CEL cases that name no gates.
func widestCEL() cel.Features {
	return cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true}
}

// nodeOnly tells whether an allocation error concerns only this node (kube-scheduler then
// tries the others instead of failing the pod's scheduling attempt).
func nodeOnly(err error) bool {
	return errors.Is(err, structured.ErrFailedAllocationOnNode)
}

// chooseVariant makes NewAllocator use only the named variant (a case's allocatorVariant), as
// upstream's own tests do (structured.EnableAllocators); "" leaves the choice to the gates, as
// kube-scheduler does. The function returned undoes it.
func chooseVariant(name string) (func(), error) {
	if name == "" {
		return func() {}, nil
	}
	if !slices.Contains([]string{"stable", "incubating", "experimental"}, name) {
		return nil, fmt.Errorf("unknown allocatorVariant %q (stable, incubating or experimental)", name)
	}
	structured.EnableAllocators(name)
	return func() { structured.EnableAllocators() }, nil
}
