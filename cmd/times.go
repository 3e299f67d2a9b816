package cmd

import (
	"fmt"

	"github.com/leasewal/leasewal/api"
)

// formatTime renders unix ms as RFC 3339 UTC with milliseconds, the one time
// format of leasewal's output.
func formatTime(ms int64) string { return api.FormatTime(ms) }

// offset renders a duration in ms as +S.mmms.
func offset(ms int64) string {
	sign := "+"
	if ms < 0 {
		sign, ms = "-", -ms
	}
	return fmt.Sprintf("%s%d.%03ds", sign, ms/1000, ms%1000)
}
