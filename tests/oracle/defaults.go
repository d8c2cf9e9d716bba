package main

import (
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server defaults objects before anything reads them; a case holds them as written.
// These are the defaults of resource.k8s.io/v1 that the allocator depends on
// (kubernetes pkg/apis/resource/v1: defaults.go and its generated counterpart).

func defaultClaim(claim *resourceapi.ResourceClaim) {
	for i := range claim.Spec.Devices.Requests {
		req := &claim.Spec.Devices.Requests[i]
		if req.Exactly != nil {
			defaultCount(&req.Exactly.AllocationMode, &req.Exactly.Count)
			defaultTolerations(req.Exactly.Tolerations)
		}
		for j := range req.FirstAvailable {
			sub := &req.FirstAvailable[j]
			defaultCount(&sub.AllocationMode, &sub.Count)
			defaultTolerations(sub.Tolerations)
		}
	}
}

func defaultCount(mode *resourceapi.DeviceAllocationMode, count *int64) {
	if *mode == "" {
		*mode = resourceapi.DeviceAllocationModeExactCount
	}
	if *mode == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
		*count = 1
	}
}

func defaultTolerations(tolerations []resourceapi.DeviceToleration) {
	for i := range tolerations {
		if tolerations[i].Operator == "" {
			tolerations[i].Operator = resourceapi.DeviceTolerationOpEqual
		}
	}
}

// A fixed time for taints written without one: the allocator does not read it, and a fixed
// value keeps answers reproducible.
var taintTimeAdded = metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))

func defaultSlice(slice *resourceapi.ResourceSlice) {
	for i := range slice.Spec.Devices {
		for j := range slice.Spec.Devices[i].Taints {
			taint := &slice.Spec.Devices[i].Taints[j]
			if taint.TimeAdded == nil {
				taint.TimeAdded = taintTimeAdded.DeepCopy()
			}
		}
	}
}
