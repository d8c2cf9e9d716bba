package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// allocationCase is a conformance case as JSON; the objects stay raw until decodeObject.
type allocationCase struct {
	Features               []string                              `json:"features"`
	AllocatorVariant       string                                `json:"allocatorVariant"`
	Node                   json.RawMessage                       `json:"node"`
	DeviceClasses          []json.RawMessage                     `json:"deviceClasses"`
	ResourceSlices         []json.RawMessage                     `json:"resourceSlices"`
	DeviceTaintRules       []json.RawMessage                     `json:"deviceTaintRules"`
	AllocatedDevices       []string                              `json:"allocatedDevices"`
	AllocatedSharedDevices []string                              `json:"allocatedSharedDevices"`
	AllocatedCapacity      map[string]map[string]json.RawMessage `json:"allocatedCapacity"`
	Claims                 []json.RawMessage                     `json:"claims"`
}

// inputs is what NewAllocator and Allocate take for one case.
type inputs struct {
	features structured.Features
	variant  string // the variant the case names, "" for the gates'
	celCache *cel.Cache
	state    structured.AllocatedState
	classes  classLister
	slices   []*resourceapi.ResourceSlice
	node     *v1.Node
	claims   []*resourceapi.ResourceClaim
	// The pod and the node's pods, for DRANodeAllocatableResources (nodeallocatable.go).
	nodeResources nodeResources
}

// The longest one case may search (kube-scheduler's own per-node limit, DRASchedulerFilterTimeout,
// is 10 seconds; the oracle is more patient). DRA_ORACLE_TIMEOUT (a Go duration) overrides it.
func caseTimeout() time.Duration {
	if text := os.Getenv("DRA_ORACLE_TIMEOUT"); text != "" {
		if d, err := time.ParseDuration(text); err == nil {
			return d
		}
	}
	return time.Minute
}

func allocate(name string, line []byte) AllocateAnswer {
	ans := AllocateAnswer{Name: name}
	in, err := readInputs(line, &ans.UnknownFields)
	if err != nil {
		ans.Outcome, ans.Error = outcomeInvalid, err.Error()
		return ans
	}
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout())
	defer cancel()
	undo, err := chooseVariant(in.variant)
	if err != nil {
		ans.Outcome, ans.Error = outcomeInvalid, err.Error()
		return ans
	}
	defer undo()
	allocator, err := structured.NewAllocator(ctx, in.features, in.state, in.classes, in.slices, in.celCache)
	if err != nil {
		ans.Outcome, ans.Error = outcomeError, err.Error()
		return ans
	}
	ans.Variant = variant(allocator)
	// The stable variant takes pools in Go's map order, which changes from run to run (the
	// newer variants sort them): run it again and list every distinct answer.
	runs := 1
	if ans.Variant == "stable" {
		runs = stableRuns()
	}
	seen := map[string]bool{}
	for range runs {
		one := run(ctx, allocator, in)
		key := one.key()
		if seen[key] {
			continue
		}
		seen[key] = true
		if ans.Outcome == "" {
			ans.Outcome, ans.Results, ans.Error, ans.NodeOnly = one.Outcome, one.Results, one.Error, one.NodeOnly
			ans.NodeAllocatable = one.NodeAllocatable
		} else {
			ans.Alternatives = append(ans.Alternatives, one)
		}
		if one.Outcome == outcomeTimeout {
			break
		}
	}
	return ans
}

// How often the stable variant is run; DRA_ORACLE_STABLE_RUNS overrides it.
func stableRuns() int {
	if n, err := strconv.Atoi(os.Getenv("DRA_ORACLE_STABLE_RUNS")); err == nil && n > 0 {
		return n
	}
	return 24
}

func run(ctx context.Context, allocator structured.Allocator, in *inputs) Alternative {
	// Each run gets the claims afresh: the allocator must not see another run's changes.
	claims := make([]*resourceapi.ResourceClaim, len(in.claims))
	for i, claim := range in.claims {
		claims[i] = claim.DeepCopy()
	}
	results, err := allocator.Allocate(ctx, in.node, claims)
	var one Alternative
	switch {
	case err != nil && ctx.Err() != nil:
		one.Outcome, one.Error = outcomeTimeout, fmt.Sprintf("timed out after %s: %v", caseTimeout(), err)
	case err != nil:
		one.Outcome, one.Error = outcomeError, err.Error()
		one.NodeOnly = nodeOnly(err)
	case results == nil:
		one.Outcome = outcomeUnsatisfiable
	default:
		one.Outcome, one.Results = outcomeAllocated, results
		statuses, reason, err := checkNodeResources(in.nodeResources, in.node, in.slices, claims, results)
		switch {
		case err != nil:
			one.Outcome, one.Results, one.Error = outcomeError, nil, err.Error()
		case reason != "":
			one.Outcome, one.Results, one.Error = outcomeUnsatisfiable, nil, reason
		default:
			one.NodeAllocatable = statuses
		}
	}
	return one
}

// variant names the package of the allocator NewAllocator chose.
func variant(allocator structured.Allocator) string {
	t := reflect.TypeOf(allocator)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return path.Base(t.PkgPath())
}

func readInputs(line []byte, unknown *[]string) (*inputs, error) {
	var c allocationCase
	if err := json.Unmarshal(line, &c); err != nil {
		return nil, err
	}
	g, err := parseGates(c.Features)
	if err != nil {
		return nil, err
	}
	in := &inputs{
		features: g.allocator(),
		variant:  c.AllocatorVariant,
		// As the scheduler plugin makes its cache.
		celCache: cel.NewCache(10, g.cel()),
		classes:  classLister{},
	}
	if len(c.Node) > 0 && string(c.Node) != "null" {
		in.node = &v1.Node{}
		if err := decodeObject(c.Node, in.node, "node", unknown); err != nil {
			return nil, err
		}
	}
	for i, raw := range c.DeviceClasses {
		class := &resourceapi.DeviceClass{}
		if err := decodeObject(raw, class, fmt.Sprintf("deviceClasses[%d]", i), unknown); err != nil {
			return nil, err
		}
		in.classes[class.Name] = class
	}
	for i, raw := range c.ResourceSlices {
		slice := &resourceapi.ResourceSlice{}
		if err := decodeObject(raw, slice, fmt.Sprintf("resourceSlices[%d]", i), unknown); err != nil {
			return nil, err
		}
		defaultSlice(slice)
		in.slices = append(in.slices, slice)
	}
	if in.slices, err = applyTaintRules(g, in.slices, c.DeviceTaintRules, unknown); err != nil {
		return nil, err
	}
	for i, raw := range c.Claims {
		claim := &resourceapi.ResourceClaim{}
		if err := decodeObject(raw, claim, fmt.Sprintf("claims[%d]", i), unknown); err != nil {
			return nil, err
		}
		defaultClaim(claim)
		in.claims = append(in.claims, claim)
	}
	if in.nodeResources, err = readNodeResources(line, g, unknown); err != nil {
		return nil, err
	}
	if in.state, err = allocatedState(c); err != nil {
		return nil, err
	}
	return in, nil
}

// allocatedState is what kube-scheduler gathers from the claims already allocated: devices
// held whole, shares of devices with consumable capacity, and the capacity they consume.
func allocatedState(c allocationCase) (structured.AllocatedState, error) {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, text := range c.AllocatedDevices {
		id, _, err := deviceRef(text, false)
		if err != nil {
			return state, err
		}
		state.AllocatedDevices.Insert(id)
	}
	for _, text := range c.AllocatedSharedDevices {
		id, share, err := deviceRef(text, true)
		if err != nil {
			return state, err
		}
		uid := types.UID(share)
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &uid))
	}
	for text, amounts := range c.AllocatedCapacity {
		id, _, err := deviceRef(text, false)
		if err != nil {
			return state, err
		}
		consumed := map[resourceapi.QualifiedName]resource.Quantity{}
		for name, raw := range amounts {
			var q resource.Quantity
			if err := json.Unmarshal(raw, &q); err != nil {
				return state, fmt.Errorf("allocatedCapacity %s %s: %w", text, name, err)
			}
			consumed[resourceapi.QualifiedName(name)] = q
		}
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, consumed))
	}
	return state, nil
}

// deviceRef splits "driver/pool/device" (and a trailing "/shareID" when shared); the pool
// name itself may contain slashes.
func deviceRef(text string, shared bool) (structured.DeviceID, string, error) {
	parts := strings.Split(text, "/")
	share := ""
	if shared {
		if len(parts) < 4 {
			return structured.DeviceID{}, "", fmt.Errorf("malformed shared device reference %q", text)
		}
		share, parts = parts[len(parts)-1], parts[:len(parts)-1]
	}
	if len(parts) < 3 {
		return structured.DeviceID{}, "", fmt.Errorf("malformed device reference %q", text)
	}
	pool := strings.Join(parts[1:len(parts)-1], "/")
	return structured.MakeDeviceID(parts[0], pool, parts[len(parts)-1]), share, nil
}

// classLister answers like the scheduler's informer-backed lister.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, class := range l {
		out = append(out, class)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	class, ok := l[name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return class, nil
}
