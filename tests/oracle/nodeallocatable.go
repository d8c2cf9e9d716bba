//go:build !k8s134

package main

// DRANodeAllocatableResources as kube-scheduler 1.37.2 applies it after allocation: the
// DynamicResources plugin works out what the pod's allocated devices cost the node (the
// NodeAllocatableResourceClaimStatuses it writes into the pod's status) and fails the node
// when the pod, with that, no longer fits the node's CPU, memory, ephemeral storage or
// hugepages. The released allocator (v0.37.2) does nothing with nodeAllocatableResources.
//
// The plugin's code (kubernetes v1.37.2 pkg/scheduler/framework/plugins/dynamicresources,
// nodeallocatabledynamicresources.go) cannot be run here: its functions are unexported, and
// running the plugin needs a scheduler framework and the k8s.io/kubernetes module, which is
// not importable without replacing every staging module. So the footprint and the fit check
// are written here again from that file (calculateAndCheckNodeAllocatableResources,
// buildNodeAllocatableDRAInfo, addDeviceMapping, addDeviceOverhead, nodeFitsResources); the
// pods' requests are the released k8s.io/component-helpers resource.PodRequests, as the
// scheduler computes them (pkg/scheduler/framework/types.go, CalculateResource). Not
// replicated: validatePodLevelResourcesCoverDRA (pods with pod-level resources are refused).
// nodeallocatable_134.go is the 1.34 counterpart (1.34 has no such gate).

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// nodeResourcesCase is what a case holds for the check: the pod whose claims these are, and
// the pods already on the node.
type nodeResourcesCase struct {
	Pod      json.RawMessage   `json:"pod"`
	NodePods []json.RawMessage `json:"nodePods"`
}

// nodeResources is that, decoded; pod is nil when the case judges no node resources.
type nodeResources struct {
	pod      *v1.Pod
	nodePods []*v1.Pod
}

func readNodeResources(line []byte, g gates, unknown *[]string) (nodeResources, error) {
	var c nodeResourcesCase
	var out nodeResources
	if err := json.Unmarshal(line, &c); err != nil {
		return out, err
	}
	if !g["DRANodeAllocatableResources"] || len(c.Pod) == 0 || string(c.Pod) == "null" {
		return out, nil
	}
	out.pod = &v1.Pod{}
	if err := decodeObject(c.Pod, out.pod, "pod", unknown); err != nil {
		return out, err
	}
	if out.pod.Spec.Resources != nil {
		return out, errors.New("pod: pod-level resources are not judged by the oracle")
	}
	for i, raw := range c.NodePods {
		other := &v1.Pod{}
		if err := decodeObject(raw, other, fmt.Sprintf("nodePods[%d]", i), unknown); err != nil {
			return out, err
		}
		out.nodePods = append(out.nodePods, other)
	}
	return out, nil
}

// errNodeResources marks an error of the plugin's own (statusError): the scheduling attempt fails.
var errNodeResources = errors.New("node-allocatable resources")

// checkNodeResources answers for claims allocated on node: the statuses kube-scheduler would
// record in the pod (nil when no allocated device uses node resources) and "" when the pod
// fits, or the Filter's failure ("Insufficient cpu", ...). Its errors wrap errNodeResources.
func checkNodeResources(nr nodeResources, node *v1.Node, slices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult) (any, string, error) {
	if nr.pod == nil || node == nil {
		return nil, "", nil
	}
	nodeSlices := slicesForNode(slices, node)
	var using []int // the claims with a device that uses node resources
	for i := range claims {
		for _, result := range results[i].Devices.Results {
			if device, err := deviceOf(nodeSlices, &result, node); err == nil && len(device.NodeAllocatableResources) > 0 {
				using = append(using, i)
				break
			}
		}
	}
	if len(using) == 0 {
		return nil, "", nil
	}
	statuses, err := claimStatuses(nr.pod, claims, results, using, nodeSlices, node)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errNodeResources, err)
	}
	with := *nr.pod
	with.Status.NodeAllocatableResourceClaimStatuses = statuses
	demand := resourcehelper.PodRequests(&with, resourcehelper.PodResourcesOptions{UseDRANodeAllocatableResourceClaimStatus: true})
	requested := v1.ResourceList{}
	for _, other := range nr.nodePods {
		if other.Spec.NodeName != node.Name || other.Status.Phase == v1.PodSucceeded || other.Status.Phase == v1.PodFailed {
			continue
		}
		addResources(requested, resourcehelper.PodRequests(other, resourcehelper.PodResourcesOptions{
			UseStatusResources: true, UseDRANodeAllocatableResourceClaimStatus: true,
		}))
	}
	return statuses, misfit(node.Status.Allocatable, requested, demand), nil
}

func addResources(into, list v1.ResourceList) {
	for name, q := range list {
		sum := into[name]
		sum.Add(q)
		into[name] = sum
	}
}

// slicesForNode: the slices the plugin looks devices up in (filterSlicesForNode).
func slicesForNode(slices []*resourceapi.ResourceSlice, node *v1.Node) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, s := range slices {
		switch {
		case s.Spec.NodeName != nil && *s.Spec.NodeName == node.Name,
			s.Spec.AllNodes != nil && *s.Spec.AllNodes,
			s.Spec.PerDeviceNodeSelection != nil && *s.Spec.PerDeviceNodeSelection && s.Spec.NodeSelector == nil:
			out = append(out, s)
		case s.Spec.NodeSelector != nil:
			if selector, err := nodeaffinity.NewNodeSelector(s.Spec.NodeSelector); err == nil && selector.Match(node) {
				out = append(out, s)
			}
		}
	}
	return out
}

// deviceOf: an allocated device in the node's slices (getDeviceFromSlices); with per-device
// node selection the device itself must select the node.
func deviceOf(slices []*resourceapi.ResourceSlice, result *resourceapi.DeviceRequestAllocationResult, node *v1.Node) (*resourceapi.Device, error) {
	for _, s := range slices {
		if s.Spec.Driver != result.Driver || s.Spec.Pool.Name != result.Pool {
			continue
		}
		for i := range s.Spec.Devices {
			device := &s.Spec.Devices[i]
			if device.Name != result.Device {
				continue
			}
			if s.Spec.PerDeviceNodeSelection != nil && *s.Spec.PerDeviceNodeSelection && !deviceSelectsNode(device, node) {
				return nil, fmt.Errorf("device %s does not match node", result.Device)
			}
			return device, nil
		}
	}
	return nil, fmt.Errorf("device %s not found in pool %s for driver %s", result.Device, result.Pool, result.Driver)
}

func deviceSelectsNode(device *resourceapi.Device, node *v1.Node) bool {
	if device.NodeName != nil && *device.NodeName == node.Name || device.AllNodes != nil && *device.AllNodes {
		return true
	}
	if device.NodeSelector != nil {
		selector, err := nodeaffinity.NewNodeSelector(device.NodeSelector)
		return err == nil && selector.Match(node)
	}
	return false
}

// claimStatuses: one status per claim that uses node resources, sorted by claim name
// (buildNodeAllocatableDRAInfo).
func claimStatuses(pod *v1.Pod, claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult, using []int, slices []*resourceapi.ResourceSlice, node *v1.Node) ([]v1.NodeAllocatableResourceClaimStatus, error) {
	byClaim := map[string]*v1.NodeAllocatableResourceClaimStatus{} // by claim UID
	for _, i := range using {
		claim := claims[i]
		mapped := map[v1.ResourceName]resource.Quantity{}
		overhead := map[v1.ResourceName]v1.NodeAllocatableOverheadResources{}
		for _, result := range results[i].Devices.Results {
			device, err := deviceOf(slices, &result, node)
			if err != nil {
				return nil, fmt.Errorf("claim %s/%s, device %s, driver %s: %w", claim.Namespace, claim.Name, result.Device, result.Driver, err)
			}
			for name, use := range device.NodeAllocatableResources {
				if use.Mapping != nil {
					if err := addMapped(mapped, name, use.Mapping, &result, claim); err != nil {
						return nil, err
					}
				}
				if use.Overhead != nil {
					addOverhead(overhead, name, use.Overhead)
				}
			}
		}
		if len(mapped) == 0 && len(overhead) == 0 {
			continue
		}
		status := &v1.NodeAllocatableResourceClaimStatus{ResourceClaimName: claim.Name, Containers: []string{}, Mapping: []v1.NodeAllocatableMappedResources{}, Overhead: []v1.NodeAllocatableOverheadResources{}}
		for name, q := range mapped {
			status.Mapping = append(status.Mapping, v1.NodeAllocatableMappedResources{Name: name, Quantity: &q})
		}
		for _, o := range overhead {
			status.Overhead = append(status.Overhead, o)
		}
		sort.Slice(status.Mapping, func(a, b int) bool { return status.Mapping[a].Name < status.Mapping[b].Name })
		sort.Slice(status.Overhead, func(a, b int) bool { return status.Overhead[a].Name < status.Overhead[b].Name })
		byClaim[string(claim.UID)] = status
	}
	uidOf, err := podClaimUIDs(pod, claims)
	if err != nil {
		return nil, err
	}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, container := range containers {
			for _, ref := range container.Resources.Claims {
				if status, ok := byClaim[uidOf[ref.Name]]; ok && uidOf[ref.Name] != "" {
					status.Containers = append(status.Containers, container.Name)
				}
			}
		}
	}
	out := make([]v1.NodeAllocatableResourceClaimStatus, 0, len(byClaim))
	for _, status := range byClaim {
		out = append(out, *status)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ResourceClaimName < out[b].ResourceClaimName })
	return out, nil
}

// podClaimUIDs: the pod's claim entry name -> the UID of the case's claim it names
// (directly, or the claim made from its template, named in the pod's status).
func podClaimUIDs(pod *v1.Pod, claims []*resourceapi.ResourceClaim) (map[string]string, error) {
	generated := map[string]string{}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			generated[s.Name] = *s.ResourceClaimName
		}
	}
	out := map[string]string{}
	for _, entry := range pod.Spec.ResourceClaims {
		name := generated[entry.Name]
		if entry.ResourceClaimName != nil {
			name = *entry.ResourceClaimName
		}
		found := false
		for _, claim := range claims {
			if claim.Name == name && claim.Namespace == pod.Namespace {
				out[entry.Name], found = string(claim.UID), true
			}
		}
		if !found {
			return nil, fmt.Errorf("pod claim %q: no claim %q among the case's claims", entry.Name, name)
		}
	}
	return out, nil
}

// addMapped: what one device adds through a mapping (addDeviceMapping): the consumed capacity
// of exactly capacityKey times capacityMultiplier, else deviceMultiplier.
func addMapped(into map[v1.ResourceName]resource.Quantity, name v1.ResourceName, mapping *resourceapi.NodeAllocatableMapping, result *resourceapi.DeviceRequestAllocationResult, claim *resourceapi.ResourceClaim) error {
	if mapping.CapacityKey != nil && *mapping.CapacityKey != "" {
		if result.ConsumedCapacity == nil {
			return fmt.Errorf("claim %s/%s, device %s: ConsumedCapacity is nil, but Capacity key '%s' is set in NodeAllocatableResources for resource %s", claim.Namespace, claim.Name, result.Device, *mapping.CapacityKey, name)
		}
		consumed, ok := result.ConsumedCapacity[*mapping.CapacityKey]
		if !ok {
			return nil
		}
		amount := consumed.DeepCopy()
		if mapping.CapacityMultiplier != nil && !mapping.CapacityMultiplier.Equal(resource.MustParse("1")) {
			product := amount.AsDec()
			product.Mul(product, mapping.CapacityMultiplier.AsDec())
			amount = *resource.NewDecimalQuantity(*product, amount.Format)
		}
		sum := into[name]
		sum.Add(amount)
		into[name] = sum
		return nil
	}
	if mapping.DeviceMultiplier != nil {
		sum := into[name]
		sum.Add(*mapping.DeviceMultiplier)
		into[name] = sum
	}
	return nil
}

// addOverhead: per-pod and per-container overheads add up over a claim's devices.
func addOverhead(into map[v1.ResourceName]v1.NodeAllocatableOverheadResources, name v1.ResourceName, o *resourceapi.NodeAllocatableOverhead) {
	if o.PerPod == nil && o.PerContainer == nil {
		return
	}
	held, ok := into[name]
	if !ok {
		held = v1.NodeAllocatableOverheadResources{Name: name}
	}
	for _, pair := range []struct{ from, to **resource.Quantity }{{&o.PerPod, &held.PerPod}, {&o.PerContainer, &held.PerContainer}} {
		if *pair.from == nil {
			continue
		}
		if *pair.to == nil {
			q := (*pair.from).DeepCopy()
			*pair.to = &q
		} else {
			(*pair.to).Add(**pair.from)
		}
	}
	into[name] = held
}

// misfit: "" when the demand fits what the node has left, else the Filter's reasons
// (nodeFitsResources: CPU in milli-units, the rest in whole units rounded up).
func misfit(allocatable, requested, demand v1.ResourceList) string {
	units := func(list v1.ResourceList, name v1.ResourceName) int64 {
		q, ok := list[name]
		if !ok {
			return 0
		}
		if name == v1.ResourceCPU {
			return q.MilliValue()
		}
		return q.Value()
	}
	var reasons []string
	check := func(name v1.ResourceName, onlyIfAsked bool) {
		want := units(demand, name)
		if onlyIfAsked && want <= 0 {
			return
		}
		if want > units(allocatable, name)-units(requested, name) {
			reasons = append(reasons, "Insufficient "+string(name))
		}
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		check(name, true)
	}
	var huge []string
	for name := range demand {
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			huge = append(huge, string(name))
		}
	}
	sort.Strings(huge) // the plugin walks a map; sorted here so the text is stable
	for _, name := range huge {
		check(v1.ResourceName(name), false)
	}
	return strings.Join(reasons, ", ")
}
