package main

import (
	"context"
	"encoding/json"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// celCase is a CEL parity case (tests/cel/cases.yaml) as JSON.
type celCase struct {
	Expression string          `json:"expression"`
	Device     json.RawMessage `json:"device"`
	// The gates whose CEL environment to use; absent: DRAConsumableCapacity and
	// DRAListTypeAttributes both on, the widest environment, which is the extender's.
	Features *[]string `json:"features"`
}

type celDevice struct {
	Driver                   string                                                    `json:"driver"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations"`
}

// evaluate compiles the expression as the allocator does (cel.Cache.GetOrCompile: no cost
// estimation) and runs it on the device. The estimated worst-case cost, which the API server
// compares with its limit when the selector is written, is reported beside the outcome.
func evaluate(name string, line []byte) CELAnswer {
	ans := CELAnswer{Name: name, CostLimit: resourceapi.CELSelectorExpressionMaxCost}
	var c celCase
	if err := json.Unmarshal(line, &c); err != nil {
		ans.Outcome, ans.Detail = outcomeInvalid, err.Error()
		return ans
	}
	features := widestCEL()
	if c.Features != nil {
		g, err := parseGates(*c.Features)
		if err != nil {
			ans.Outcome, ans.Detail = outcomeInvalid, err.Error()
			return ans
		}
		features = g.cel()
	}
	var device celDevice
	if err := decodeObject(c.Device, &device, "device", &ans.UnknownFields); err != nil {
		ans.Outcome, ans.Detail = outcomeInvalid, err.Error()
		return ans
	}
	compiler := cel.GetCompiler(features)
	if estimated, err := compile(compiler, c.Expression, cel.Options{}); err == nil {
		maxCost := estimated.MaxCost
		ans.MaxCost = &maxCost
	}
	compiled, err := compile(compiler, c.Expression, cel.Options{DisableCostEstimation: true})
	if err != nil {
		ans.Outcome, ans.Detail = "compile-error", err.Error()
		return ans
	}
	matches, details, err := compiled.DeviceMatches(context.Background(), device.input())
	if details != nil {
		ans.Cost = details.ActualCost()
	}
	ans.Outcome, ans.Detail = matchOutcome(matches, err)
	return ans
}

// input is the device as DeviceMatches reads it.
func (device celDevice) input() cel.Device {
	return cel.Device{
		Driver:                   device.Driver,
		AllowMultipleAllocations: device.AllowMultipleAllocations,
		Attributes:               device.Attributes,
		Capacity:                 device.Capacity,
	}
}

// matchOutcome is a case's outcome and detail from what DeviceMatches returned.
func matchOutcome(matches bool, err error) (string, string) {
	switch {
	case err != nil:
		return "error", err.Error()
	case matches:
		return "true", ""
	default:
		return "false", ""
	}
}

// compile is CompileCELExpression, with a panic of cel-go while planning the program (a map
// literal with a bytes key: "hash of unhashable type types.Bytes") turned into its error: the
// expression cannot be compiled by the release, which is what a case records.
func compile(compiler interface {
	CompileCELExpression(string, cel.Options) cel.CompilationResult
}, expression string, options cel.Options) (result cel.CompilationResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cel-go panicked compiling the expression: %v", r)
		}
	}()
	result = compiler.CompileCELExpression(expression, options)
	if result.Error != nil {
		return result, result.Error
	}
	return result, nil
}
