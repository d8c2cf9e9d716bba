// Command oracle answers dra-extender's conformance and CEL parity cases with the released
// upstream code: the structured allocator and the CEL environment of
// k8s.io/dynamic-resource-allocation, at the version go.mod requires.
//
// It reads JSON requests, one per line (JSON Lines), from stdin or from the files named as
// arguments, and writes one JSON answer per request, in order, to stdout. A request is a
// conformance case (tests/conformance/cases/FORMAT.md, converted from YAML to JSON) with
// "mode": "allocate", or a CEL parity case (tests/cel/cases.yaml) with "mode": "cel" (or
// "bench": the case timed, for python -m loadtest.bench_cel --costly; bench.go).
// The answers are described in answer.go and bench.go. Nothing in the answer is judged here: the Python
// side (extender/tools/oracle.py) compares.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	inputs := []io.Reader{os.Stdin}
	if len(os.Args) > 1 {
		inputs = nil
		for _, path := range os.Args[1:] {
			f, err := os.Open(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "oracle:", err)
				os.Exit(2)
			}
			defer f.Close()
			inputs = append(inputs, f)
		}
	}
	enc := json.NewEncoder(out)
	for _, in := range inputs {
		scanner := bufio.NewScanner(in)
		scanner.Buffer(make([]byte, 0, 1<<20), 256<<20)
		for scanner.Scan() {
			line := scanner.Bytes()
			if len(line) == 0 {
				continue
			}
			if err := enc.Encode(answer(line)); err != nil {
				fmt.Fprintln(os.Stderr, "oracle:", err)
				os.Exit(2)
			}
			// One answer per line, flushed, so a caller may talk to one process at a time.
			if err := out.Flush(); err != nil {
				os.Exit(2)
			}
		}
		if err := scanner.Err(); err != nil {
			fmt.Fprintln(os.Stderr, "oracle:", err)
			os.Exit(2)
		}
	}
}

// answer handles one request; a request the oracle cannot read is answered with
// outcome "invalid" rather than ending the stream.
func answer(line []byte) any {
	var head struct {
		Mode string `json:"mode"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return invalid(head.Name, fmt.Errorf("request is not JSON: %w", err))
	}
	switch head.Mode {
	case "allocate":
		return allocate(head.Name, line)
	case "cel":
		return evaluate(head.Name, line)
	case "bench":
		return bench(head.Name, line)
	default:
		return invalid(head.Name, fmt.Errorf("unknown mode %q (allocate, cel or bench)", head.Mode))
	}
}
