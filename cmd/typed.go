package cmd

import (
	"fmt"
	"strings"
)

// unknownRoute says why a POST path is no operation.
func unknownRoute(path string) string {
	first, _, _ := strings.Cut(path, "/")
	switch {
	case first == "run":
		return "a server does not start children: 'leasewal --server URL run' runs them on the client and leases through /v1/lease"
	case localOnly[first]:
		return first + " works on the WAL's own machine only: run it there, without --server"
	}
	return fmt.Sprintf("%q is not a command", path)
}
