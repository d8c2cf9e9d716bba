package main

import (
	"context"
	"encoding/json"
	"time"

	"k8s.io/dynamic-resource-allocation/cel"
)

// benchCase is a CEL parity case (see celCase) to be timed: the expression is compiled once,
// as the allocator does, and evaluated on the device again and again for at least MinSeconds
// (default 0.2) and at least MinRuns times (default 3).
type benchCase struct {
	celCase
	MinSeconds float64 `json:"minSeconds"`
	MinRuns    int     `json:"minRuns"`
}

// BenchAnswer is how long the released CEL environment takes per evaluation of one case.
type BenchAnswer struct {
	Name string `json:"name"`
	// true, false, error (at runtime), compile-error, or invalid: as for a "cel" request.
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// The runtime cost of one evaluation (cel-go's ActualCost).
	Cost *uint64 `json:"cost,omitempty"`
	// Evaluations timed and the mean wall-clock nanoseconds of one.
	Runs      int     `json:"runs"`
	NsPerEval float64 `json:"nsPerEval"`
}

// bench times DeviceMatches of one case; the first evaluation is timed too, as it is in
// the Python benchmark (the device's maps are built per evaluation upstream anyway).
func bench(name string, line []byte) BenchAnswer {
	ans := BenchAnswer{Name: name}
	var c benchCase
	if err := json.Unmarshal(line, &c); err != nil {
		ans.Outcome, ans.Detail = outcomeInvalid, err.Error()
		return ans
	}
	minSeconds, minRuns := c.MinSeconds, c.MinRuns
	if minSeconds <= 0 {
		minSeconds = 0.2
	}
	if minRuns <= 0 {
		minRuns = 3
	}
	var device celDevice
	var unknown []string
	if err := decodeObject(c.Device, &device, "device", &unknown); err != nil {
		ans.Outcome, ans.Detail = outcomeInvalid, err.Error()
		return ans
	}
	compiled, err := compile(cel.GetCompiler(widestCEL()), c.Expression, cel.Options{DisableCostEstimation: true})
	if err != nil {
		ans.Outcome, ans.Detail = "compile-error", err.Error()
		return ans
	}
	input := device.input()
	ctx := context.Background()
	limit := time.Duration(minSeconds * float64(time.Second))
	started := time.Now()
	for ans.Runs < minRuns || time.Since(started) < limit {
		matches, details, err := compiled.DeviceMatches(ctx, input)
		ans.Runs++
		if ans.Runs > 1 {
			continue
		}
		if details != nil {
			ans.Cost = details.ActualCost()
		}
		ans.Outcome, ans.Detail = matchOutcome(matches, err)
	}
	ans.NsPerEval = float64(time.Since(started).Nanoseconds()) / float64(ans.Runs)
	return ans
}
