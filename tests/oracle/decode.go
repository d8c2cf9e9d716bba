package main

import (
	"fmt"

	sigsjson "sigs.k8s.io/json"
)

// decodeObject reads one Kubernetes object (or any value) the way the API machinery does:
// case-sensitive field names. Fields the released API does not have are ignored, and listed
// in unknown (prefixed with where) so that a case written for a newer API is noticed.
func decodeObject(data []byte, into any, where string, unknown *[]string) error {
	strict, err := sigsjson.UnmarshalStrict(data, into)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	for _, e := range strict {
		*unknown = append(*unknown, fmt.Sprintf("%s: %v", where, e))
	}
	return nil
}
