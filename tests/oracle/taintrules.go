//go:build !k8s134

package main

// DeviceTaintRules as kube-scheduler 1.37 applies them: with DRADeviceTaintRules on, its DRA
// manager lists the slices through the released ResourceSlice tracker
// (k8s.io/dynamic-resource-allocation/resourceslice/tracker; kubernetes pkg/scheduler/scheduler.go
// starts it, pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go lists its patched
// slices), which appends the taint of every matching rule to the devices it selects. Here the
// tracker runs on informers fed from the case instead of an API server. taintrules_134.go is
// the 1.34 counterpart.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
)

// applyTaintRules is the slices as the allocator gets them: through the tracker when the gate
// is on (the rules are ignored otherwise: kube-scheduler starts no rule informer then), in the
// order given. The rules are the case's deviceTaintRules (v1 DeviceTaintRule objects).
func applyTaintRules(g gates, slices []*resourceapi.ResourceSlice, raws []json.RawMessage, unknown *[]string) ([]*resourceapi.ResourceSlice, error) {
	var rules []*resourceapi.DeviceTaintRule
	for i, raw := range raws {
		rule := &resourceapi.DeviceTaintRule{}
		if err := decodeObject(raw, rule, fmt.Sprintf("deviceTaintRules[%d]", i), unknown); err != nil {
			return nil, err
		}
		// The API server sets timeAdded on create; the allocator does not read it.
		if rule.Spec.Taint.TimeAdded == nil {
			rule.Spec.Taint.TimeAdded = taintTimeAdded.DeepCopy()
		}
		rules = append(rules, rule)
	}
	if !g["DRADeviceTaintRules"] || len(rules) == 0 {
		return slices, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return trackedSlices(ctx, g, slices, rules)
}

// trackedSlices runs the released tracker over the slices and rules and lists its patched
// slices, as kube-scheduler's DRA manager does (ListWithDeviceTaintRules).
func trackedSlices(ctx context.Context, g gates, slices []*resourceapi.ResourceSlice, rules []*resourceapi.DeviceTaintRule) ([]*resourceapi.ResourceSlice, error) {
	sliceList := &resourceapi.ResourceSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, s := range slices {
		sliceList.Items = append(sliceList.Items, *s)
	}
	ruleList := &resourceapi.DeviceTaintRuleList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, r := range rules {
		ruleList.Items = append(ruleList.Items, *r)
	}
	sliceInformer := typedSliceInformer{cache.NewSharedIndexInformer(caseLister(sliceList), &resourceapi.ResourceSlice{}, 0, cache.Indexers{})}
	ruleInformer := typedRuleInformer{cache.NewSharedIndexInformer(caseLister(ruleList), &resourceapi.DeviceTaintRule{}, 0, cache.Indexers{})}
	t, err := tracker.StartTracker(ctx, tracker.Options{
		EnableDeviceTaintRules:   true,
		EnableConsumableCapacity: g["DRAConsumableCapacity"],
		SliceInformer:            sliceInformer,
		TaintInformer:            ruleInformer,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the ResourceSlice tracker: %w", err)
	}
	defer t.Stop()
	stop := make(chan struct{})
	defer close(stop)
	go sliceInformer.inf.Run(stop)
	go ruleInformer.inf.Run(stop)
	select {
	case <-t.HasSyncedChecker().Done():
	case <-ctx.Done():
		return nil, fmt.Errorf("the ResourceSlice tracker did not sync: %w", ctx.Err())
	}
	patched, err := t.ListPatchedResourceSlices()
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*resourceapi.ResourceSlice, len(patched))
	for _, s := range patched {
		byName[s.Name] = s
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, s := range slices {
		p, ok := byName[s.Name]
		if !ok {
			return nil, fmt.Errorf("the ResourceSlice tracker lost slice %q (duplicate name?)", s.Name)
		}
		out = append(out, p)
	}
	return out, nil
}

// caseLister lists the case's objects once and then watches a stream where nothing happens.
func caseLister(list runtime.Object) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return list.DeepCopyObject(), nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}, listOnly{})
}

// listOnly tells the reflector to list, as it does with clients that cannot stream a watch list.
type listOnly struct{}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

type typedSliceInformer struct{ inf cache.SharedIndexInformer }

func (i typedSliceInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i typedSliceInformer) TypedInformer() resourceinformers.ResourceSliceIndexInformer {
	return cache.NewTypedSharedIndexInformer[*resourceapi.ResourceSlice](i.inf)
}
func (i typedSliceInformer) Lister() resourcelisters.ResourceSliceLister {
	return resourcelisters.NewResourceSliceLister(i.inf.GetIndexer())
}

type typedRuleInformer struct{ inf cache.SharedIndexInformer }

func (i typedRuleInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i typedRuleInformer) TypedInformer() resourceinformers.DeviceTaintRuleIndexInformer {
	return cache.NewTypedSharedIndexInformer[*resourceapi.DeviceTaintRule](i.inf)
}
func (i typedRuleInformer) Lister() resourcelisters.DeviceTaintRuleLister {
	return resourcelisters.NewDeviceTaintRuleLister(i.inf.GetIndexer())
}
