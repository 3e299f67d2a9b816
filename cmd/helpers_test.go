package cmd

import (
	"bytes"
	"strings"
)

// cli runs leasewal in-process and returns its exit code, stdout and stderr.
func cli(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}
