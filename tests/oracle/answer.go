package main

import (
	resourceapi "k8s.io/api/resource/v1"
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
	// The error text, for outcome error or invalid.
	Error string `json:"error,omitempty"`
	// The error wraps ErrFailedAllocationOnNode: kube-scheduler reports the node as
	// unschedulable and tries the others instead of failing the pod's scheduling attempt.
	NodeOnly bool `json:"nodeOnly,omitempty"`
	// Fields of the case's objects the released API does not have (they were ignored).
	UnknownFields []string `json:"unknownFields,omitempty"`
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
