//go:build k8s134

package main

// DeviceTaintRules in 1.34: kube-scheduler 1.34 reads them as resource.k8s.io/v1alpha3 objects
// (with DRADeviceTaints), an API the case format does not hold; its v1 DeviceTaintRule came
// with 1.37 (taintrules.go). The case's rules are not read, and the answer says so.

import (
	"encoding/json"

	resourceapi "k8s.io/api/resource/v1"
)

func applyTaintRules(_ gates, slices []*resourceapi.ResourceSlice, raws []json.RawMessage, unknown *[]string) ([]*resourceapi.ResourceSlice, error) {
	if len(raws) > 0 {
		*unknown = append(*unknown, "deviceTaintRules: resource.k8s.io/v1 DeviceTaintRule does not exist in 1.34 (not read)")
	}
	return slices, nil
}
