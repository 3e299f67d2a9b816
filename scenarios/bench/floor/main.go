// Command floor is the benchmark's start-up floor: a program that links the
// four packages leasewal is built on (cobra, viper, tablewriter, color) and
// does nothing else. No leasewal command can start faster than it does, so
// bench prints its time beside sqlite3's.
package main

import (
	_ "github.com/fatih/color"
	_ "github.com/olekukonko/tablewriter"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
)

func main() {}
