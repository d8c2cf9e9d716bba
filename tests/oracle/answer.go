package main

import (
	"encoding/json"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Outcomes of an allocation request, named as in tests/conformance/cases/FORMAT.md; "invalid"
// for a request the oracle could not turn into the allocator's inputs, and "timeout" for a
// search that did not end in time.
const (
	outcomeAllocated     = "allocated"
	outcomeUnsatisfiable = "unsatisfiable"
	outcomeError         = "error"
	outcomeInvalid       = "invalid"
	outcomeTimeout       = "timeout"
)

// AllocateAnswer is the released allocator's answer to one conformance case.
type AllocateAnswer struct {
	Name string `json:"name"`
	// The allocator variant NewAllocator picked for the case's features:
	// "stable", "incubating" or "experimental".
	Variant string `json:"variant,omitempty"`
	Outcome string `json:"outcome"`
	// One result per claim, in order, for outcome allocated.
	Results []resourceapi.AllocationResult `json:"results,omitempty"`
	// With DRANodeAllocatableResources and the case's pod: what the allocated devices cost the
	// node, as kube-scheduler writes it into the pod's status (nodeallocatable.go).
	NodeAllocatable any `json:"nodeAllocatableResourceClaimStatuses,omitempty"`
	// The error text, for outcome error or invalid.
	Error string `json:"error,omitempty"`
	// The error wraps ErrFailedAllocationOnNode: kube-scheduler reports the node as
	// unschedulable and tries the others instead of failing the pod's scheduling attempt.
	NodeOnly bool `json:"nodeOnly,omitempty"`
	// Other answers the same allocator gave for the same case (the stable variant's pool
	// order is Go's map order): a different answer here is as right as the first.
	Alternatives []Alternative `json:"alternatives,omitempty"`
	// Fields of the case's objects the released API does not have (they were ignored).
	UnknownFields []string `json:"unknownFields,omitempty"`
}

// Alternative is one answer of the allocator to a case.
type Alternative struct {
	Outcome         string                         `json:"outcome"`
	Results         []resourceapi.AllocationResult `json:"results,omitempty"`
	NodeAllocatable any                            `json:"nodeAllocatableResourceClaimStatuses,omitempty"`
	Error           string                         `json:"error,omitempty"`
	NodeOnly        bool                           `json:"nodeOnly,omitempty"`
}

// key tells answers apart, ignoring what differs on every run (allocation time, share IDs).
func (a Alternative) key() string {
	results := make([]resourceapi.AllocationResult, len(a.Results))
	for i, r := range a.Results {
		r = *r.DeepCopy()
		r.AllocationTimestamp = nil
		for j := range r.Devices.Results {
			if r.Devices.Results[j].ShareID != nil {
				marker := types.UID("share")
				r.Devices.Results[j].ShareID = &marker
			}
		}
		results[i] = r
	}
	data, _ := json.Marshal(Alternative{a.Outcome, results, a.NodeAllocatable, a.Error, a.NodeOnly})
	return string(data)
}

// CELAnswer is the released CEL environment's answer to one parity case.
type CELAnswer struct {
	Name string `json:"name"`
	// true, false, error (at runtime), compile-error, or invalid.
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// The runtime cost of the evaluation, when it ran.
	Cost *uint64 `json:"cost,omitempty"`
	// The estimated worst-case cost, when estimation succeeded.
	MaxCost *uint64 `json:"maxCost,omitempty"`
	// The limit the API server checks MaxCost against when a selector is written.
	CostLimit     uint64   `json:"costLimit,omitempty"`
	UnknownFields []string `json:"unknownFields,omitempty"`
}

type invalidAnswer struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
}

func invalid(name string, err error) invalidAnswer {
	return invalidAnswer{Name: name, Outcome: outcomeInvalid, Error: err.Error()}
}
